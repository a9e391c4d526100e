/**
 * The demo's two scenes and what they stand on: the timeline printed as they
 * run, the workers' acquires (every token kept for the history check, every
 * skipped epoch explained) and their reads and writes through the guarded
 * resource. Apart from demo.ts, which parses the command, starts the cluster
 * and sums up: these are the story it tells, told against any running cluster.
 */
import { QuorumFenceError } from '../common/errors.js';
import { localOperatorSecret } from '../common/operator-secret.js';
import type { Cluster } from '../cluster/description.js';
import type { QuorumFenceClient } from '../client/client.js';
import type { Lease } from '../client/lease.js';
import type { ReplicaFault } from '../client/evidence.js';
import { parseGuardLogEntry, type GuardLogEntry } from '../guard/log.js';
import { byzantineState, controlByzantine } from '../testing/byzantine/control.js';

export const RESOURCE = 'demo/orders';
export const LEDGER = 'demo/ledger';

export interface Context {
  readonly startedAt: number;
  readonly cluster: Cluster;
  readonly resourceUrl: string;
  readonly capturedTokens: string[];
  readonly faults: ReplicaFault[];
  /** Per resource, the epoch of the last token the demo got: a larger next one than last + 1 is explained. */
  readonly lastEpochs: Map<string, bigint>;
}

export function say(ctx: { startedAt: number }, who: string, text: string): void {
  const seconds = ((performance.now() - ctx.startedAt) / 1000).toFixed(2).padStart(6);
  process.stdout.write(`[${seconds}s] ${who.padEnd(9)} ${text}\n`);
}

export function heading(text: string): void {
  process.stdout.write(`\n${text}\n${'-'.repeat(text.length)}\n`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function put(ctx: Context, resource: string, key: string, token: string, value: string) {
  const response = await fetch(`${ctx.resourceUrl}/kv/${encodeURIComponent(resource)}/${encodeURIComponent(key)}`, {
    method: 'PUT',
    headers: { authorization: `QuorumFence ${token}` },
    body: value,
    signal: AbortSignal.timeout(10_000),
  });
  const body = (await response.json()) as {
    ok: boolean;
    code?: string;
    barrier?: string | number;
    epoch?: string | number;
  };
  return { status: response.status, ...body };
}

async function read(ctx: Context, resource: string, key: string): Promise<string> {
  const response = await fetch(`${ctx.resourceUrl}/kv/${encodeURIComponent(resource)}/${encodeURIComponent(key)}`, {
    signal: AbortSignal.timeout(10_000),
  });
  return response.ok ? await response.text() : `(${response.status})`;
}

export async function guardLog(ctx: Context): Promise<GuardLogEntry[]> {
  const entries: GuardLogEntry[] = [];
  for (let after = 0; ;) {
    const response = await fetch(`${ctx.resourceUrl}/log?after=${after}&limit=500`, {
      // The launcher gave the resource this process's operator secret; the checker needs the tokens.
      headers: { authorization: `Bearer ${localOperatorSecret()}` },
      signal: AbortSignal.timeout(10_000),
    });
    const page = ((await response.json()) as { entries: unknown[] }).entries.map(parseGuardLogEntry);
    if (page.length === 0) return entries;
    entries.push(...page);
    after = page[page.length - 1]!.seq;
  }
}

async function acquire(
  ctx: Context,
  who: string,
  client: QuorumFenceClient,
  resource: string,
  options: { ttlMs: number; waitMs: number; autoRenew?: boolean },
): Promise<Lease> {
  const result = await client.acquire(resource, options);
  ctx.faults.push(...result.faults);
  if (!result.ok)
    throw new QuorumFenceError(
      'INTERNAL',
      `${who} could not acquire ${resource}: ${result.reason} (${result.message})`,
    );
  ctx.capturedTokens.push(result.lease.tokenText);
  const last = ctx.lastEpochs.get(resource);
  ctx.lastEpochs.set(resource, result.lease.epoch);
  if (last !== undefined && result.lease.epoch > last + 1n)
    say(ctx, 'replicas', skippedEpochs(resource, last, result.lease.epoch));
  return result.lease;
}

/**
 * Why a token's epoch is not the last one plus one. An epoch is spent once any replica signed it: an attempt
 * that got some replicas' signatures but not the 3 a token needs (it came while another holder's lease ran,
 * or at the same moment as another worker's, or a lying replica spoiled it) releases them, and no replica
 * signs a released epoch again (docs/protocol.md); a compacted record's floor skips epochs the same way. A
 * token only has to be above the last one.
 */
function skippedEpochs(resource: string, last: bigint, epoch: bigint): string {
  const skipped = epoch - last === 2n ? `epoch ${last + 1n} was` : `epochs ${last + 1n}..${epoch - 1n} were`;
  return `${resource}: ${skipped} skipped, not lost: an attempt that some replicas signed but not 3 gave it up, and no replica signs a given-up epoch again; a token needs only a larger epoch than the last`;
}

/** Scene 1. Returns whether the stale write was refused. */
export async function staleWriteScene(
  ctx: Context,
  a: QuorumFenceClient,
  b: QuorumFenceClient,
  ttlMs: number,
  pauseMs: number,
): Promise<boolean> {
  heading('Scene 1: a paused worker writes with an expired lease');
  const leaseA = await acquire(ctx, 'A', a, RESOURCE, { ttlMs, waitMs: 0, autoRenew: false });
  say(
    ctx,
    'worker A',
    `acquired ${RESOURCE} at epoch ${leaseA.epoch} (lease ${ttlMs} ms, token ${leaseA.tokenText.slice(0, 12)}…)`,
  );
  const first = await put(ctx, RESOURCE, 'total', leaseA.tokenText, '100');
  say(
    ctx,
    'worker A',
    `PUT ${RESOURCE} total=100 with epoch ${leaseA.epoch} → ${first.status} ${first.ok ? 'accepted' : first.code} (barrier ${first.barrier})`,
  );
  say(ctx, 'worker A', `stalls for ${pauseMs} ms (a stand-in for a GC pause): it cannot renew, and its lease runs out`);
  const waking = sleep(pauseMs);

  say(ctx, 'worker B', `asks for ${RESOURCE}; the replicas say it is busy until A's lease ends`);
  const leaseB = await acquire(ctx, 'B', b, RESOURCE, { ttlMs: 10_000, waitMs: ttlMs + 10_000 });
  say(ctx, 'worker B', `acquired ${RESOURCE} at epoch ${leaseB.epoch} once A's lease had run out`);
  const second = await put(ctx, RESOURCE, 'total', leaseB.tokenText, '250');
  say(
    ctx,
    'worker B',
    `PUT ${RESOURCE} total=250 with epoch ${leaseB.epoch} → ${second.status} ${second.ok ? 'accepted' : second.code} (barrier ${second.barrier})`,
  );
  await leaseB.release();
  say(ctx, 'worker B', `released ${RESOURCE}`);

  await waking;
  say(ctx, 'worker A', `wakes up, still believing it holds the lease, and writes with its epoch-${leaseA.epoch} token`);
  const stale = await put(ctx, RESOURCE, 'total', leaseA.tokenText, '101');
  const refused = stale.status === 409 && stale.code === 'stale';
  say(
    ctx,
    'resource',
    `PUT ${RESOURCE} total=101 with epoch ${leaseA.epoch} → ${stale.status} ${stale.code ?? 'accepted'}: barrier is ${stale.barrier}, ${refused ? 'REFUSED' : 'ACCEPTED (this must not happen)'}`,
  );
  say(
    ctx,
    'resource',
    `${RESOURCE} total = ${await read(ctx, RESOURCE, 'total')} (B's write survived; without the fence A would have overwritten it)`,
  );
  return refused;
}

/** Scene 2. Returns the malicious replica's index as named by clients, and whether the history is clean. */
export async function maliciousReplicaScene(
  ctx: Context,
  clients: [QuorumFenceClient, QuorumFenceClient],
  liarUrl: string,
  rounds: number,
) {
  heading('Scene 2: replica 4 turns malicious');
  await controlByzantine(liarUrl, { behaviours: ['equivocate', 'garbage'], rate: 1 });
  say(ctx, 'replica 4', 'now equivocates (signs any holder at any epoch) and sends garbage partials');
  say(
    ctx,
    'replica 4',
    'a token needs 3 signatures and each honest replica signs one holder per epoch, so its extra votes never make a second token',
  );
  say(
    ctx,
    'workers',
    `take turns on ${LEDGER}, another resource: its epochs and its barrier are its own, apart from those of ${RESOURCE}`,
  );
  const faultsBefore = ctx.faults.length;
  let granted = 0;
  const turn = async (client: QuorumFenceClient, who: string, round: number) => {
    const lease = await acquire(ctx, who, client, LEDGER, { ttlMs: 5_000, waitMs: 15_000 });
    granted++;
    const write = await put(ctx, LEDGER, 'last-writer', lease.tokenText, `${who} round ${round}`);
    say(
      ctx,
      who,
      `${LEDGER} epoch ${String(lease.epoch).padStart(2)} → PUT ${write.status} ${write.ok ? 'accepted' : write.code}`,
    );
    await lease.release();
  };
  await Promise.all(
    clients.map(async (client, k) => {
      for (let round = 1; round <= rounds; round++) {
        await turn(client, k === 0 ? 'worker A' : 'worker B', round);
        // A moment between turns, so the other worker gets in and the turns interleave.
        await sleep(10 + Math.random() * 30);
      }
    }),
  );
  // A client stops listening once t partials verify, so a liar that answers last goes unseen; on a busy
  // machine that can last a while. A few more turns (bounded) let it show itself.
  for (let extra = 1; extra <= 30 && !ctx.faults.slice(faultsBefore).some((fault) => fault.replica === 4); extra++) {
    if (extra === 1) say(ctx, 'clients', 'replica 4 has answered after the honest replicas so far; a few more turns');
    await turn(clients[extra % 2]!, extra % 2 === 0 ? 'worker A' : 'worker B', rounds + extra);
    await sleep(5);
  }
  const state = await byzantineState(liarUrl);
  const acts = Object.entries(state.acts);
  const lies = acts.reduce((sum, [, count]) => sum + (count ?? 0), 0);
  say(
    ctx,
    'replica 4',
    `lied in ${lies} of ${state.requests} requests (${acts.map(([behaviour, count]) => `${behaviour} ${count}`).join(', ') || 'none'})`,
  );
  const blamed = new Map<number, Set<string>>();
  for (const fault of ctx.faults.slice(faultsBefore)) {
    if (!blamed.has(fault.replica)) blamed.set(fault.replica, new Set());
    blamed.get(fault.replica)!.add(fault.kind);
  }
  for (const [replica, kinds] of blamed)
    say(ctx, 'clients', `caught replica ${replica} lying: ${[...kinds].join(', ')}`);
  return { granted, blamed };
}
