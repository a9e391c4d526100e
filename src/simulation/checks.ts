/**
 * The verdict on one run (docs/testing.md):
 *
 * - safety: the history checker (src/testing/history-checker.ts) over the guard's log, every token a client
 *   obtained, and the writes it was told were accepted: S1 (one token per resource and epoch), S4 (accepted
 *   epochs never go down), every accepted token and every token a client holds valid, no acknowledged write lost,
 *   and across a reshare no epoch granted again; the guard refused nothing but stale writes below its barrier; no
 *   token held by two clients; the lease ledger (lease-ledger.ts: leases exclusive at every honest replica, renewed
 *   and released only by their holder's session, the restart rule, epoch steps, clients' views backed by t
 *   replicas and never overlapping); no honest replica answered on a connection whose hello did not verify (a
 *   forged, replayed or tampered hello: malicious.ts); no client threw and no replica failed a request;
 * - liveness: every operation issued after the heal (at most f replicas faulty, the network calm) got its lease
 *   within `livenessBoundMs`, a lease held for several ttls once the restart rule's leases were over was never
 *   lost (leases outlive any f of their signers), and each replica's line granted waiters in arrival order;
 * - bounded state: once every lease has ended, no replica keeps a waiter, a running lease, more records or
 *   watched resources than the run has resources, and no client keeps a request, a listener, a lease or a write
 *   open; nothing is left in flight.
 */
import { checkHistory, formatViolation, type History } from '../testing/history-checker.js';
import { livenessBoundMs } from './scenario.js';
import type { World } from './world.js';

export interface Verdict {
  readonly violations: string[];
  readonly livenessFailures: string[];
}

/** @param finished the run reached its end (every operation done, the quiet period passed) within its limits. */
export function judge(world: World, finished: boolean): Verdict {
  const violations = [...safety(world), ...boundedState(world, finished)];
  const livenessFailures = [...liveness(world, finished), ...world.lines.violations()];
  return { violations, livenessFailures };
}

function safety(world: World): string[] {
  const { clients, guard } = world;
  const tokenGenerations = new Map<string, number>();
  for (const client of clients)
    for (const [token, generation] of client.generations) tokenGenerations.set(token, generation);
  const history: History = {
    guardLogs: [guard.log],
    capturedTokens: clients.flatMap((client) => client.tokens),
    acknowledged: clients.flatMap((client) => client.acknowledged),
    finalVersions: [guard.versions],
    tokenGenerations,
    reshares: world.reshares,
  };
  const checked = checkHistory(history, world.reshares[0]?.before ?? world.keys.cluster);
  const found = checked.ok ? [] : checked.violations.map(formatViolation);
  found.push(
    ...guardRefusals(world),
    ...tokensShared(world),
    ...world.leases.violations,
    ...probeAnswers(world),
    ...forgedHelloAnswers(world),
  );
  for (const client of clients)
    for (const error of client.errors) found.push(`client ${client.address} threw: ${error}`);
  found.push(...world.failures);
  return found;
}

/**
 * The guard refuses an honest client's write only as stale, and only below its barrier: every token a client
 * writes with is one it obtained and checked, for the resource it writes to, so any other refusal (`bad_token`,
 * `malformed`, `wrong_resource`, a `conflict`...) means a client held what it should not have.
 */
function guardRefusals(world: World): string[] {
  const found: string[] = [];
  for (const entry of world.guard.log) {
    if (entry.accepted) continue;
    if (entry.outcome !== 'stale')
      found.push(`guard refused #${entry.seq} (${entry.resource} epoch ${entry.epoch ?? '-'}): ${entry.outcome}`);
    else if (entry.epoch !== null && BigInt(entry.epoch) >= BigInt(entry.barrierBefore ?? 0))
      found.push(
        `guard refused #${entry.seq} at epoch ${entry.epoch} as stale, not below its barrier ${entry.barrierBefore}`,
      );
  }
  return found;
}

/**
 * The malicious client's probes (malicious.ts) got, from every honest replica, an answer the rules allow (when the
 * evidence shown came from honest replicas only).
 */
function probeAnswers(world: World): string[] {
  const honest = new Set(world.allReplicas.filter((replica) => !replica.byzantine).map((replica) => replica.address));
  return world.probes
    .filter((probe) => honest.has(probe.replica) && probe.backers.every((backer) => honest.has(backer)))
    .filter((probe) => !probe.allowed.includes(probe.answered))
    .map(
      (probe) =>
        `replica ${probe.replica} answered the ${probe.probe} probe ${probe.answered}, not ${probe.allowed.join(' or ')}`,
    );
}

/**
 * No honest replica answers anything on a connection whose hello does not verify (malicious.ts, `forgeHello`): not
 * the hello (a welcome), not a request on it (so nothing is granted to the holder the hello named), nothing pushed.
 */
function forgedHelloAnswers(world: World): string[] {
  const honest = new Set(world.allReplicas.filter((replica) => !replica.byzantine).map((replica) => replica.address));
  return world.forgedHellos
    .filter((answer) => honest.has(answer.replica))
    .map(
      (answer) =>
        `replica ${answer.replica} answered ${answer.answered} on a connection whose hello did not verify ` +
        `(${answer.forgery}, naming ${answer.named}'s holder key)`,
    );
}

/**
 * One token per client: two clients holding the same token (the same resource, epoch and holder: two sessions of one
 * identity) both believe they hold the lease, and the guard accepts both (docs/protocol.md, "Sessions").
 */
function tokensShared(world: World): string[] {
  const holders = new Map<string, string>();
  const found: string[] = [];
  for (const client of world.clients)
    for (const token of new Set(client.tokens)) {
      const other = holders.get(token);
      if (other !== undefined && other !== client.address)
        found.push(`clients ${other} and ${client.address} both hold token ${token.slice(0, 16)}…`);
      holders.set(token, client.address);
    }
  return found;
}

function liveness(world: World, finished: boolean): string[] {
  const failures: string[] = [];
  if (!finished) failures.push('the run did not finish within its limits (an operation never ended)');
  const bound = livenessBoundMs(world.plan.clients);
  for (const client of world.clients) {
    for (const outcome of client.outcomes) {
      if (!outcome.op.judged) continue;
      const took = outcome.acquiredAt - outcome.startedAt;
      if (!outcome.ok)
        failures.push(`${client.address}: acquire of ${outcome.op.resource} after the heal failed: ${outcome.reason}`);
      else if (took > bound)
        failures.push(`${client.address}: acquire of ${outcome.op.resource} took ${took} ms, bound ${bound}`);
    }
    for (const loss of client.leaseLosses) failures.push(`${client.address}: lease lost after the heal: ${loss}`);
  }
  return failures;
}

function boundedState(world: World, finished: boolean): string[] {
  if (!finished) return [];
  const found: string[] = [];
  const resources = world.plan.resources.length;
  for (const replica of world.replicas) {
    const service = replica.service;
    // A Byzantine replica's memory is its own (an ignored release keeps its line's request until its ttl).
    if (!service || replica.byzantine) continue;
    const where = `replica ${replica.address}`;
    if (service.handoffs.size > 0)
      found.push(`${where} keeps ${service.handoffs.size} waiters after every lease ended`);
    if (service.leases.activeCount() > 0)
      found.push(`${where} counts ${service.leases.activeCount()} leases running after every lease ended`);
    if (service.leases.size > resources)
      found.push(`${where} keeps ${service.leases.size} lease entries for ${resources} resources`);
    if (service.store.size > resources)
      found.push(`${where} keeps ${service.store.size} records for ${resources} resources`);
    if (replica.watched > resources) found.push(`${where} watches ${replica.watched} resources of ${resources}`);
  }
  for (const client of world.clients) {
    const open = client.openState;
    for (const [what, count] of Object.entries(open))
      if (count > 0) found.push(`client ${client.address} keeps ${count} ${what} open after its last operation`);
  }
  if (world.guard.barriers > resources)
    found.push(`the guard keeps ${world.guard.barriers} barriers for ${resources} resources`);
  if (world.network.inFlight > 0)
    found.push(`${world.network.inFlight} messages still in flight after the quiet period`);
  return found;
}
