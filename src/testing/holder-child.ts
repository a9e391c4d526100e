/**
 * The body of a holder process (see holder-process.ts): a real client in its
 * own process, so a test or chaos run can SIGSTOP and SIGCONT it like a
 * holder hit by a long GC pause or a suspended VM. It reads one JSON command
 * per line on stdin and answers one JSON line each on stdout, in order:
 *
 *   { id, cmd: "acquire", resource, ttlMs, waitMs, autoRenew? } → { id, ok, epoch, token } | { id, ok: false, reason }
 *   { id, cmd: "increment", resource, key, checkLease? }         → { id, kind, ..., tokenDigest?, version? }
 *   { id, cmd: "release", resource }                             → { id, ok }
 *   { id, cmd: "follow", candidate, endpoints }                  → { id, ok, membershipVersion } | { id, ok: false, code }
 *
 * "increment" uses the lease it holds for the resource; with checkLease false
 * it writes without looking at its lease view (the holder that checked just
 * before its pause). "follow" takes a newer membership after a reshare: the
 * candidate file (an endorsed cluster.json) is accepted only as
 * followMembership accepts it, and the holder then reaches that membership's
 * replicas at `endpoints` (its group's proxies) with a new client of the same
 * identity; leases of the old client are dropped. It exits when stdin closes.
 *
 * Run as `node dist/src/testing/holder-child.js --cluster FILE --resource URL`.
 */
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { QuorumFenceClient, followMembership, generateIdentity, loadClusterFile, type Lease } from '../client/index.js';
import { withEndpoints } from '../cluster/description.js';
import { ResourceHttpClient, WorkloadRecorder, tokenDigestHex, writeIncrement } from './workload.js';

interface Command {
  readonly id: number;
  readonly cmd: 'acquire' | 'increment' | 'release' | 'follow';
  readonly resource: string;
  readonly candidate?: string;
  readonly endpoints?: readonly string[];
  readonly key?: string;
  readonly ttlMs?: number;
  readonly waitMs?: number;
  readonly autoRenew?: boolean;
  readonly checkLease?: boolean;
}

const { values } = parseArgs({ options: { cluster: { type: 'string' }, resource: { type: 'string' } }, strict: true });
if (!values.cluster || !values.resource) {
  process.stderr.write('usage: holder-child --cluster FILE --resource URL\n');
  process.exit(2);
}
const clientOptions = { handshakeTimeoutMs: 1000 };
let client = await QuorumFenceClient.connect(loadClusterFile(values.cluster), generateIdentity(), clientOptions);
const resourceClient = new ResourceHttpClient(values.resource);
const recorder = new WorkloadRecorder();
const leases = new Map<string, Lease>();
const answer = (body: Record<string, unknown>): void =>
  void process.stdout.write(
    JSON.stringify(body, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)) + '\n',
  );

async function run(command: Command): Promise<Record<string, unknown>> {
  switch (command.cmd) {
    case 'acquire': {
      const result = await client.acquire(command.resource, {
        ttlMs: command.ttlMs ?? 1000,
        waitMs: command.waitMs ?? 0,
        autoRenew: command.autoRenew ?? true,
      });
      if (!result.ok) return { ok: false, reason: result.reason, message: result.message };
      leases.set(command.resource, result.lease);
      return {
        ok: true,
        epoch: result.lease.epoch,
        token: result.lease.tokenText,
        tokenDigest: tokenDigestHex(result.lease.token),
      };
    }
    case 'increment': {
      const lease = leases.get(command.resource);
      if (!lease) return { kind: 'no_lease' };
      const outcome = await writeIncrement(lease, resourceClient, command.resource, command.key ?? 'n', recorder, {
        checkLease: command.checkLease ?? true,
      });
      return { ...outcome, tokenDigest: tokenDigestHex(lease.token), leaseActive: lease.active };
    }
    case 'release': {
      const lease = leases.get(command.resource);
      leases.delete(command.resource);
      if (!lease) return { ok: false };
      return { ...(await lease.release()) };
    }
    case 'follow': {
      const outcome = followMembership(client.cluster, JSON.parse(readFileSync(command.candidate ?? '', 'utf8')));
      if (!outcome.ok) return { ok: false, code: outcome.code, message: outcome.message };
      const previous = client;
      client = await QuorumFenceClient.connect(
        withEndpoints(outcome.cluster, command.endpoints ?? outcome.cluster.replicas.map((r) => r.endpoint)),
        previous.identity,
        clientOptions,
      );
      leases.clear();
      await previous.close();
      return { ok: true, membershipVersion: outcome.cluster.membershipVersion };
    }
  }
}

const lines = createInterface({ input: process.stdin });
let queue: Promise<void> = Promise.resolve();
lines.on('line', (line) => {
  let command: Command;
  try {
    command = JSON.parse(line) as Command;
  } catch {
    answer({ error: 'not JSON' });
    return;
  }
  queue = queue.then(() =>
    run(command).then(
      (body) => answer({ id: command.id, ...body }),
      (error: unknown) => answer({ id: command.id, error: (error as Error).message }),
    ),
  );
});
lines.on('close', () => {
  void queue.then(async () => {
    await client.close();
    process.exit(0);
  });
});
answer({ event: 'ready' });
