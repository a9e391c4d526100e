/**
 * `quorumfence-dev worker`: one demo worker, as the compose file runs two of them.
 * It acquires a lease, writes through a guarded resource, optionally stalls
 * past its lease (a stand-in for a GC pause) and writes again with the old
 * token, and checks the resource answered as expected.
 */
import { QuorumFenceError } from '../common/errors.js';
import { loadClusterFile } from '../cluster/description.js';
import { QuorumFenceClient } from '../client/client.js';
import { generateIdentity, loadIdentityFile } from '../client/identity.js';
import { parseDuration, parseFlags, required, type Command } from '../command/args.js';

const usage = `usage: quorumfence-dev worker --name NAME --cluster FILE --resource RESOURCE --guard URL
                          [--identity FILE] [--ttl 3s] [--wait 15s] [--start-after 0s]
                          [--pause DURATION] [--expect accepted|stale] [--json]

A demo worker: acquires RESOURCE, writes "NAME epoch E" to URL/kv/RESOURCE/owner
with its token, then either releases the lease or, with --pause, stalls that long
without renewing (a stand-in for a GC pause) and writes again with the same token.
Exit code 0 when the last write was answered as --expect says (default accepted).

options:
  --name NAME          label in the output and the written value        (required)
  --cluster FILE       cluster description                               (required)
  --resource RESOURCE  the lock and the guarded resource                 (required)
  --guard URL          base URL of the guarded resource (quorumfence resource)  (required)
  --identity FILE      client key (default: a fresh one in memory)
  --ttl DURATION       lease length                                      (default 3s)
  --wait DURATION      how long to wait while another worker holds it    (default 15s)
  --start-after D      sleep before starting                             (default 0s)
  --pause DURATION     stall after the first write, then write again
  --expect OUTCOME     accepted or stale: what the last write must get   (default accepted)
  --json               one JSON line per event
`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const command: Command = {
  summary: 'a demo worker: acquire, write through a guard, optionally stall past the lease',
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, {
      name: { type: 'string' },
      cluster: { type: 'string' },
      resource: { type: 'string' },
      guard: { type: 'string' },
      identity: { type: 'string' },
      ttl: { type: 'string' },
      wait: { type: 'string' },
      'start-after': { type: 'string' },
      pause: { type: 'string' },
      expect: { type: 'string' },
      json: { type: 'boolean' },
    });
    const name = required(values.name, 'name');
    const resource = required(values.resource, 'resource');
    const guard = required(values.guard, 'guard').replace(/\/+$/, '');
    const expect = values.expect ?? 'accepted';
    if (expect !== 'accepted' && expect !== 'stale')
      throw new QuorumFenceError('INVALID_OPTION', `--expect is accepted or stale, got "${expect}"`);
    const ttlMs = parseDuration(values.ttl, 'ttl', 3_000);
    const waitMs = parseDuration(values.wait, 'wait', 15_000);
    const pauseMs = values.pause === undefined ? undefined : parseDuration(values.pause, 'pause', 0);
    const cluster = loadClusterFile(required(values.cluster, 'cluster'));
    const identity = values.identity ? loadIdentityFile(values.identity) : generateIdentity();
    const report = (event: string, fields: Record<string, unknown>) =>
      process.stdout.write(
        values.json
          ? JSON.stringify({ worker: name, event, ...fields }) + '\n'
          : `worker ${name}: ${event} ${Object.entries(fields)
              .map(([k, v]) => `${k}=${v}`)
              .join(' ')}\n`,
      );

    await sleep(parseDuration(values['start-after'], 'start-after', 0));
    const client = await QuorumFenceClient.connect(cluster, identity);
    try {
      const acquired = await client.acquire(resource, { ttlMs, waitMs, autoRenew: pauseMs === undefined });
      if (!acquired.ok) {
        report('not-acquired', { reason: acquired.reason, message: acquired.message });
        return 1;
      }
      const lease = acquired.lease;
      report('acquired', { resource, epoch: lease.epoch });
      const write = async (value: string) => {
        let response: Response;
        try {
          response = await fetch(`${guard}/kv/${encodeURIComponent(resource)}/owner`, {
            method: 'PUT',
            headers: { authorization: `QuorumFence ${lease.tokenText}` },
            body: value,
            signal: AbortSignal.timeout(10_000),
          });
        } catch (error) {
          throw new QuorumFenceError(
            'CONNECTION_FAILED',
            `cannot reach the guarded resource at ${guard}: ${(error as Error).message}`,
          );
        }
        const body = (await response.json().catch(() => ({}))) as { code?: string; barrier?: unknown };
        const outcome = response.status === 200 ? 'accepted' : (body.code ?? `http-${response.status}`);
        report('write', { epoch: lease.epoch, status: response.status, outcome, barrier: body.barrier });
        return outcome;
      };
      let last = await write(`${name} epoch ${lease.epoch}`);
      if (pauseMs !== undefined) {
        report('pause', { ms: pauseMs, note: 'not renewing: the lease runs out meanwhile' });
        await sleep(pauseMs);
        last = await write(`${name} epoch ${lease.epoch} after the pause`);
      } else {
        await lease.release();
        report('released', { epoch: lease.epoch });
      }
      const met = last === expect;
      report(met ? 'done' : 'unexpected', { expected: expect, got: last });
      return met ? 0 : 1;
    } finally {
      await client.close();
    }
  },
};
