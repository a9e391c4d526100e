/**
 * `quorumfence-dev worker`: one demo worker, as the compose file runs two of them.
 * It acquires a lease, writes through a guarded resource, optionally stalls
 * past its lease (a stand-in for a GC pause) and writes again with the old
 * token, and checks the resource answered as expected.
 *
 * The compose file's two workers start together, and a container may be scheduled
 * seconds late, so the story waits on its own state, never on a clock: worker B
 * starts once worker A's write is the resource's value (A holds the lease; B's
 * acquire then waits for it to lapse), and worker A stalls until a larger epoch
 * has written (the barrier is above its own).
 */
import { QuorumFenceError } from '../common/errors.js';
import { loadClusterFile } from '../cluster/description.js';
import { QuorumFenceClient } from '../client/client.js';
import { generateIdentity, loadIdentityFile } from '../client/identity.js';
import { parseDuration, parseFlags, required, type Command } from '../command/args.js';

const usage = `usage: quorumfence-dev worker --name NAME --cluster FILE --resource RESOURCE --guard URL
                          [--identity FILE] [--ttl 3s] [--wait 15s] [--start-after 0s]
                          [--after-write-by NAME] [--after-timeout 120s]
                          [--pause DURATION [--until-superseded]] [--expect accepted|stale] [--json]

A demo worker: acquires RESOURCE, writes "NAME epoch E" to URL/kv/RESOURCE/owner
with its token, then either releases the lease or, with --pause, stalls that long
without renewing (a stand-in for a GC pause) and writes again with the same token.
Exit code 0 when the last write was answered as --expect says (default accepted).

Two workers can play the stale-write story whatever the scheduling: the first with
--pause D --until-superseded --expect stale, the second with --after-write-by
FIRST --expect accepted. The second acquires only once the first's write is the
resource's value (so the first holds the lease, and the acquire waits for it to
lapse); the first writes again only once a larger epoch has written.

options:
  --name NAME          label in the output and the written value        (required)
  --cluster FILE       cluster description                               (required)
  --resource RESOURCE  the lock and the guarded resource                 (required)
  --guard URL          base URL of the guarded resource (quorumfence resource)  (required)
  --identity FILE      client key (default: a fresh one in memory)
  --ttl DURATION       lease length                                      (default 3s)
  --wait DURATION      how long to wait while another worker holds it    (default 15s)
  --start-after D      sleep before starting                             (default 0s)
  --after-write-by N   acquire only once the resource's value was written by the
                       worker named N (read without a token, every 250 ms)
  --after-timeout D    how long to wait for that write; then exit 1      (default 120s)
  --pause DURATION     stall after the first write, then write again
  --until-superseded   with --pause: stall until the resource's barrier is above this
                       worker's epoch (a later holder wrote), at most --pause
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
      'after-write-by': { type: 'string' },
      'after-timeout': { type: 'string' },
      pause: { type: 'string' },
      'until-superseded': { type: 'boolean' },
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
    const untilSuperseded = values['until-superseded'] === true;
    if (untilSuperseded && pauseMs === undefined)
      throw new QuorumFenceError('INVALID_OPTION', '--until-superseded needs --pause (the longest stall)');
    const afterWriteBy = values['after-write-by'];
    const afterTimeoutMs = parseDuration(values['after-timeout'], 'after-timeout', 120_000);
    if (values['after-timeout'] !== undefined && afterWriteBy === undefined)
      throw new QuorumFenceError('INVALID_OPTION', '--after-timeout goes with --after-write-by');
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

    const startAfterMs = parseDuration(values['start-after'], 'start-after', 0);
    const story = new StoryState(guard, resource);
    await sleep(startAfterMs);
    if (afterWriteBy !== undefined) {
      report('waiting', { for: `a write by ${afterWriteBy}`, 'at-most-ms': afterTimeoutMs });
      const value = await story.waitForWriteBy(afterWriteBy, afterTimeoutMs);
      if (value === undefined) {
        report('gave-up', { waited: `${afterTimeoutMs} ms`, for: `a write by ${afterWriteBy}` });
        return 1;
      }
      report('saw', { value: JSON.stringify(value) });
    }
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
        if (untilSuperseded) {
          report('pause', { 'at-most-ms': pauseMs, until: 'a larger epoch has written', note: 'not renewing' });
          const barrier = await story.waitForBarrierAbove(lease.epoch, pauseMs);
          report('wakes', { barrier: barrier ?? 'unchanged' });
        } else {
          report('pause', { ms: pauseMs, note: 'not renewing: the lease runs out meanwhile' });
          await sleep(pauseMs);
        }
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

/** How often the story's state is read while a worker waits on it. */
const POLL_MS = 250;

/** What the guarded resource shows of the story: reads without a token, which change nothing there. */
class StoryState {
  readonly #guard: string;
  readonly #resource: string;

  constructor(guard: string, resource: string) {
    this.#guard = guard;
    this.#resource = encodeURIComponent(resource);
  }

  /** The value under `owner`, or undefined when there is none yet or the resource does not answer. */
  async owner(): Promise<string | undefined> {
    const response = await this.#get(`/kv/${this.#resource}/owner`);
    return response?.status === 200 ? response.text() : undefined;
  }

  /** The resource's barrier epoch, or undefined when no write was accepted yet or it does not answer. */
  async barrier(): Promise<bigint | undefined> {
    const response = await this.#get(`/barrier/${this.#resource}`);
    if (response?.status !== 200) return undefined;
    const body = (await response.json().catch(() => ({}))) as { epoch?: unknown };
    return typeof body.epoch === 'string' && /^\d+$/.test(body.epoch) ? BigInt(body.epoch) : undefined;
  }

  /** Waits until the value was written by worker `name` (it writes "NAME epoch E"); undefined after `limitMs`. */
  async waitForWriteBy(name: string, limitMs: number): Promise<string | undefined> {
    return this.#poll(limitMs, async () => {
      const value = await this.owner();
      return value?.startsWith(`${name} epoch `) ? value : undefined;
    });
  }

  /** Waits until the barrier is above `epoch`; the barrier then, or undefined after `limitMs`. */
  async waitForBarrierAbove(epoch: bigint, limitMs: number): Promise<bigint | undefined> {
    return this.#poll(limitMs, async () => {
      const barrier = await this.barrier();
      return barrier !== undefined && barrier > epoch ? barrier : undefined;
    });
  }

  async #poll<T>(limitMs: number, probe: () => Promise<T | undefined>): Promise<T | undefined> {
    const deadline = Date.now() + limitMs;
    for (;;) {
      const found = await probe();
      if (found !== undefined) return found;
      const left = deadline - Date.now();
      if (left <= 0) return undefined;
      await sleep(Math.min(POLL_MS, left));
    }
  }

  async #get(path: string): Promise<Response | undefined> {
    try {
      return await fetch(`${this.#guard}${path}`, { signal: AbortSignal.timeout(5_000) });
    } catch {
      return undefined;
    }
  }
}
