/**
 * The system bench's loop: clients in this process in closed loops of acquire
 * [+ a write through the guard] + release against running replicas and the
 * reference resource, reached directly or through the delay proxies (reach).
 * Apart from system.ts because the gray bench runs the same loop under its
 * faults, and the profiled loops run it under the profiler: one loop, whatever
 * is measured around it.
 */
import { Agent, request as httpRequest } from 'node:http';
import { QuorumFenceError } from '../common/errors.js';
import { withEndpoints, type Cluster } from '../cluster/description.js';
import type { LocalCluster } from '../cluster/launcher.js';
import type { LocalProcess } from '../cluster/local-process.js';
import { QuorumFenceClient } from '../client/client.js';
import { verifyBatcherFor } from '../crypto/verify-batch.js';
import { generateIdentity } from '../client/identity.js';
import { guardBatches, replicaCounters } from './counters.js';
import type { Links } from './network.js';
import { closedLoop, type CycleWindow, type LoopCondition, type LoopRate } from './measure.js';

/** The processes a loop runs against, and how its clients reach them. */
export interface Running {
  readonly local: LocalCluster;
  /** The cluster with the endpoints the clients dial (the replicas' own, or routes to them). */
  readonly cluster: Cluster;
  /** Where the clients send their guarded writes. */
  readonly resourceUrl: string;
  /** The resource's own address, for the bench's reads of its /metrics. */
  readonly metricsUrl: string;
}

/** `local` and `resource` as the clients reach them through `links`. */
export async function reach(local: LocalCluster, resource: LocalProcess, links: Links): Promise<Running> {
  const endpoints = await Promise.all(local.cluster.replicas.map((r) => links.route(r.endpoint)));
  return {
    local,
    cluster: withEndpoints(local.cluster, endpoints),
    resourceUrl: await links.route(resource.url),
    metricsUrl: resource.url,
  };
}

/** One guarded write through the reference resource over a keep-alive connection of `agent`. */
async function guardedWrite(
  agent: Agent,
  resourceUrl: string,
  resource: string,
  token: string,
  body: string,
): Promise<void> {
  const status = await new Promise<number>((resolveStatus, reject) => {
    const request = httpRequest(
      `${resourceUrl}/kv/${encodeURIComponent(resource)}/value`,
      { method: 'PUT', agent, headers: { authorization: `QuorumFence ${token}`, 'content-length': body.length } },
      (response) => {
        response.resume();
        response.once('end', () => resolveStatus(response.statusCode ?? 0));
      },
    );
    request.once('error', reject);
    request.end(body);
  });
  if (status !== 200) throw new QuorumFenceError('INTERNAL', `benchmark: the guard refused a write with ${status}`);
}

/**
 * `clients` clients in closed loops of acquire [+ a guarded write] + release for `seconds` (measure.ts,
 * closedLoop), each on `resourceOf(its index)`; with `condition`, under it (bench --gray).
 */
export async function acquireLoop(
  running: Running,
  clients: number,
  seconds: number,
  resourceOf: (k: number) => string,
  write: boolean,
  window?: CycleWindow,
  condition?: LoopCondition,
): Promise<LoopRate> {
  // Default client options throughout: waiters on a hot resource hear of each release from the replicas.
  const { local, resourceUrl, metricsUrl } = running;
  const connected = await Promise.all(
    Array.from({ length: clients }, () => QuorumFenceClient.connect(running.cluster, generateIdentity())),
  );
  // Keep-alive connections to the resource, one per client, as etcd's side gets (global fetch costs the client more CPU).
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  try {
    const signedBefore = (await replicaCounters(local)).grantsSigned;
    const batcher = verifyBatcherFor(local.cluster.backend);
    const batchesBefore = { batches: batcher.batches, checks: batcher.checks };
    const guardBefore = await guardBatches(metricsUrl);
    const rate = await closedLoop(
      clients,
      seconds,
      async (k, remainingMs) => {
        const resource = resourceOf(k);
        const t0 = performance.now();
        const acquired = await connected[k]!.acquire(resource, {
          ttlMs: 10_000,
          waitMs: remainingMs,
          autoRenew: false,
        });
        const acquireMs = performance.now() - t0;
        if (!acquired.ok) {
          if (acquired.reason === 'busy' || acquired.reason === 'timeout') return undefined;
          throw new QuorumFenceError(
            'INTERNAL',
            `benchmark: acquire refused (${acquired.reason}): ${acquired.message}`,
          );
        }
        if (write) await guardedWrite(agent, resourceUrl, resource, acquired.lease.tokenText, 'x');
        await acquired.lease.release();
        return acquireMs;
      },
      window,
      condition,
    );
    const signed = (await replicaCounters(local)).grantsSigned - signedBefore;
    const guardAfter = await guardBatches(metricsUrl);
    return {
      ...rate,
      // Under a condition, cycles also ran uncounted while it settled: the replicas' count would be shared out wrong.
      ...(condition ? {} : { signaturesPerGrant: signed / (rate.operations + clients) }),
      clientChecksPerBatch: (batcher.checks - batchesBefore.checks) / (batcher.batches - batchesBefore.batches),
      ...(write
        ? {
            guardChecksPerBatch: (guardAfter.checks - guardBefore.checks) / (guardAfter.batches - guardBefore.batches),
          }
        : {}),
    };
  } finally {
    await Promise.all(connected.map((c) => c.close()));
    agent.destroy();
  }
}
