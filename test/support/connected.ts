/**
 * `QuorumFenceClient.connect` returns once `t` replicas are ready, and an acquire asks `t` of the connected
 * ones in the resource's ring order. A test that relies on which replicas take part (a resource's leader, the
 * signers whose records it reads afterwards) first waits for every connection, or the last one to connect
 * is left out now and then.
 */
import type { QuorumFenceClient } from '../../src/client/client.js';

/** Waits (bounded) until every one of `client`'s replica connections is ready; returns their phases. */
export async function untilAllReady(client: QuorumFenceClient, timeoutMs = 10_000): Promise<string[]> {
  const deadline = performance.now() + timeoutMs;
  while (client.replicas().some((r) => r.state.phase !== 'ready') && performance.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 25));
  return client.replicas().map((r) => r.state.phase);
}
