/**
 * The console's status line, pure: from what one poll decided (view.ts), the alerts (alerts.ts) and the lease lists,
 * one word for the cluster (`healthy`, `degraded`, `unavailable`), a sentence saying what is true now, the reasons
 * behind it and the next actions, each pointing at a runbook (runbooks.ts). The page shows it at the top and
 * `/api/state` carries it as data (docs/console.md, "The status line").
 *
 * - unavailable: fewer than t = 2f+1 replicas are available (reachable and not faulty): acquires fail now.
 * - degraded: acquires work, but a replica is unreachable or faulty (however many remain to spare: N = 7 with one
 *   down is degraded), leases are at risk, or an alert that no replica state explains is firing.
 * - healthy: every replica available, nothing at risk, no such alert firing.
 */
import type { AlertState } from './alerts.js';
import type { RunbookId } from './runbooks.js';

/** How a replica is unreachable, decided by the console's connection to it. */
export type UnreachableKind =
  /** Its connection is open (or opening) but it answered nothing within the timeout: stopped, overloaded, a stalled path. */
  | 'hung'
  /** Its connection is refused, closed or not there: nothing listens. */
  | 'down'
  /** It answers but refused the console's login (its access rules do not name the console's key). */
  | 'login_refused';

export type ClusterStatus = 'starting' | 'healthy' | 'degraded' | 'unavailable';

export interface SituationReplica {
  readonly replica: number;
  readonly reachable: boolean;
  readonly unreachableAs: UnreachableKind | null;
  /** Since when it has not been reachable (ISO 8601, UTC), or null. */
  readonly downSince: string | null;
  /** Why it is unreachable, in the connection's words. */
  readonly connection: string;
  readonly faulty: string | null;
  readonly faultySince: string | null;
}

export interface SituationInput {
  readonly polls: number;
  readonly n: number;
  readonly t: number;
  readonly margin: number;
  readonly available: number;
  readonly timeoutMs: number;
  readonly replicas: readonly SituationReplica[];
  readonly alerts: readonly AlertState[];
  /** Resources of the leases fewer than t replicas list (view.ts, `atRisk`). */
  readonly leasesAtRisk: readonly string[];
  /** Replicas whose lease list was cut (`more`). */
  readonly leaseListsCut: readonly number[];
}

export type ReasonCode =
  | 'acquires_failing'
  | 'no_spare'
  | 'replica_faulty'
  | 'replica_down'
  | 'replica_hung'
  | 'replica_login_refused'
  | 'leases_at_risk'
  | 'lease_lists_cut'
  | 'alert_firing';

export interface SituationReason {
  readonly code: ReasonCode;
  /** What it makes the status: `info` changes nothing. */
  readonly severity: 'unavailable' | 'degraded' | 'info';
  readonly text: string;
  readonly replicas: readonly number[];
  /** Since when it holds (ISO 8601, UTC), when known. */
  readonly since: string | null;
}

export type ActionCode =
  | 'bring_back'
  | 'restart'
  | 'investigate_hung'
  | 'replace'
  | 'grant_console_access'
  | 'expect_lost_leases'
  | 'watch_resources'
  | 'check_disk'
  | 'find_client';

export interface SituationAction {
  readonly code: ActionCode;
  readonly text: string;
  readonly runbook: RunbookId;
  readonly replicas: readonly number[];
}

export interface Situation {
  readonly status: ClusterStatus;
  /** One sentence: what is true now. */
  readonly headline: string;
  readonly reasons: readonly SituationReason[];
  /** The next actions, most urgent first. */
  readonly actions: readonly SituationAction[];
}

/** Faulty first, then down, then hung, then the rest; by index within each. */
export function worstFirst(replicas: readonly SituationReplica[]): number[] {
  const rank = (r: SituationReplica) =>
    r.faulty !== null
      ? 0
      : r.unreachableAs === 'down' || r.unreachableAs === 'login_refused'
        ? 1
        : !r.reachable
          ? 2
          : 3;
  return [...replicas].sort((a, b) => rank(a) - rank(b) || a.replica - b.replica).map((r) => r.replica);
}

/** "2", "2 or 4", "2, 3 or 4" (or "and"). */
function list(items: readonly (number | string)[], last: 'or' | 'and'): string {
  if (items.length <= 1) return items.join('');
  return `${items.slice(0, -1).join(', ')} ${last} ${items.at(-1)}`;
}

const plural = (count: number, one: string, many: string) => (count === 1 ? one : many);

function time(iso: string | null): string {
  return iso ? `${iso.slice(11, 19)} UTC` : 'the console’s start';
}

/** Which replicas to bring back so that acquires work again: "replica 2 or 4", "2 of replicas 2, 3 and 4". */
function bringBackText(candidates: readonly number[], need: number): string {
  if (need >= candidates.length)
    return `${plural(candidates.length, 'replica', 'replicas')} ${list(candidates, 'and')}`;
  if (need === 1) return `replica ${list(candidates, 'or')}`;
  return `${need} of replicas ${list(candidates, 'and')}`;
}

/** Firing alerts whose cause a replica's state or the margin already names are not repeated as reasons. */
const EXPLAINED_BY_REPLICA_STATE = new Set([
  'QuorumFenceQuorumMarginExhausted',
  'QuorumFenceQuorumMarginExhaustedByScrape',
  'QuorumFenceReplicaDown',
  'QuorumFenceReplicaFaulty',
  'QuorumFenceEquivocationEvidence',
]);

const ALERT_RUNBOOKS: Readonly<Record<string, { runbook: RunbookId; action: ActionCode; text: string }>> = {
  QuorumFenceFlushLatencyHigh: {
    runbook: 'flush-slow',
    action: 'check_disk',
    text: 'Check the volume of the replica whose fsync is slow',
  },
  QuorumFenceRefusalSpike: {
    runbook: 'refusal-spike',
    action: 'find_client',
    text: 'Find the client whose requests the replica refuses (its logs name the holder key)',
  },
};

function alertReasonText(alert: AlertState): string {
  const where = alert.instances
    .filter((i) => i.state === 'firing')
    .map(
      (i) =>
        Object.entries(i.labels)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ') || 'the cluster',
    );
  const since = alert.instances.map((i) => i.since).sort()[0] ?? null;
  return `Alert ${alert.alert} (${alert.severity}) is firing for ${list(where, 'and')} since ${time(since)}.`;
}

export function assessSituation(input: SituationInput): Situation {
  const { n, t, margin, available, replicas } = input;
  if (input.polls === 0)
    return { status: 'starting', headline: 'Waiting for the first poll of the replicas.', reasons: [], actions: [] };
  const reasons: SituationReason[] = [];
  const actions: SituationAction[] = [];
  const order = worstFirst(replicas);
  const byIndex = new Map(replicas.map((r) => [r.replica, r]));
  const unavailable = replicas.filter((r) => !r.reachable || r.faulty !== null);
  const answering = `${available} of ${n} ${plural(n, 'replica', 'replicas')} ${plural(available, 'answers', 'answer')} honestly and an acquire needs ${t}`;

  if (margin < 0) {
    reasons.push({
      code: 'acquires_failing',
      severity: 'unavailable',
      text: `Acquires fail: ${answering}.`,
      replicas: unavailable.map((r) => r.replica),
      since: null,
    });
    const need = t - available;
    const candidates = order.filter((i) => byIndex.get(i)!.faulty === null && !byIndex.get(i)!.reachable);
    const faulty = order.filter((i) => byIndex.get(i)!.faulty !== null);
    if (candidates.length > 0)
      actions.push({
        code: 'bring_back',
        text:
          `Bring back ${bringBackText(candidates, need)}: acquires work again once ${t} replicas answer` +
          (candidates.length < need
            ? `; that is not enough, so also replace faulty ${plural(faulty.length, 'replica', 'replicas')} ${list(faulty, 'and')} by a reshare.`
            : '.'),
        runbook: 'acquires-failing',
        replicas: candidates,
      });
  } else if (margin === 0) {
    reasons.push({
      code: 'no_spare',
      severity: 'degraded',
      text: `One more replica lost stops acquires: ${answering}.`,
      replicas: unavailable.map((r) => r.replica),
      since: null,
    });
  }

  for (const index of order) {
    const r = byIndex.get(index)!;
    if (r.faulty !== null) {
      reasons.push({
        code: 'replica_faulty',
        severity: 'degraded',
        text: `Replica ${index} is faulty since ${time(r.faultySince)}: ${r.faulty}.`,
        replicas: [index],
        since: r.faultySince,
      });
      actions.push({
        code: 'replace',
        text: `Save the evidence against replica ${index}, take it out of service and replace its share by a reshare.`,
        runbook: 'replica-faulty',
        replicas: [index],
      });
    }
    // A replica whose connection the console closed for breaking the protocol is faulty, not down: said once above.
    if (r.reachable || r.unreachableAs === null) continue;
    const since = time(r.downSince);
    if (r.unreachableAs === 'hung') {
      reasons.push({
        code: 'replica_hung',
        severity: 'degraded',
        text: `Replica ${index} is hung since ${since}: its connection is open but it answered nothing within ${input.timeoutMs} ms.`,
        replicas: [index],
        since: r.downSince,
      });
      if (r.faulty === null)
        actions.push({
          code: 'investigate_hung',
          text: `Find out why replica ${index} does not answer (a stopped process, an overloaded node, its disk, the network); restart it on its own volume if it does not recover.`,
          runbook: 'replica-hung',
          replicas: [index],
        });
    } else if (r.unreachableAs === 'login_refused') {
      reasons.push({
        code: 'replica_login_refused',
        severity: 'degraded',
        text: `Replica ${index} refuses the console’s identity since ${since}: ${r.connection}.`,
        replicas: [index],
        since: r.downSince,
      });
      actions.push({
        code: 'grant_console_access',
        text: `Let the console’s key in on replica ${index} (its access rules, --config).`,
        runbook: 'console-refused',
        replicas: [index],
      });
    } else {
      reasons.push({
        code: 'replica_down',
        severity: 'degraded',
        text: `Replica ${index} is down since ${since}: ${r.connection}.`,
        replicas: [index],
        since: r.downSince,
      });
      if (r.faulty === null)
        actions.push({
          code: 'restart',
          text: `Restart replica ${index} on its own volume and read its logs (a replica that cannot start names the reason).`,
          runbook: 'replica-down',
          replicas: [index],
        });
    }
  }

  if (input.leasesAtRisk.length > 0) {
    const shown = input.leasesAtRisk.slice(0, 3).map((r) => JSON.stringify(r));
    const more = input.leasesAtRisk.length - shown.length;
    reasons.push({
      code: 'leases_at_risk',
      severity: 'degraded',
      text: `${input.leasesAtRisk.length} ${plural(input.leasesAtRisk.length, 'lease is', 'leases are')} listed by fewer than ${t} replicas, so ${plural(input.leasesAtRisk.length, 'its', 'their')} next renewal fails: ${shown.join(', ')}${more > 0 ? ` and ${more} more` : ''}.`,
      replicas: [],
      since: null,
    });
    actions.push({
      code: 'expect_lost_leases',
      text: `Expect the holders of the leases at risk to lose them at their time left and acquire again; bringing back replicas saves them.`,
      runbook: 'leases-at-risk',
      replicas: [],
    });
  }

  if (input.leaseListsCut.length > 0) {
    const cut = input.leaseListsCut;
    reasons.push({
      code: 'lease_lists_cut',
      severity: 'info',
      text: `${plural(cut.length, 'Replica', 'Replicas')} ${list(cut, 'and')} listed only the leases ending last and said more are running: leases ending sooner are not shown, nor flagged at risk.`,
      replicas: cut,
      since: null,
    });
    actions.push({
      code: 'watch_resources',
      text: 'Give the console --watch RESOURCE for each resource you must always see, or run quorumfence status RESOURCE.',
      runbook: 'lease-list-cut',
      replicas: cut,
    });
  }

  for (const alert of input.alerts) {
    if (alert.state !== 'firing' || EXPLAINED_BY_REPLICA_STATE.has(alert.alert)) continue;
    const where = alert.instances.flatMap((i) => (i.labels.replica ? [Number(i.labels.replica)] : []));
    reasons.push({
      code: 'alert_firing',
      severity: 'degraded',
      text: alertReasonText(alert),
      replicas: where,
      since: alert.instances.map((i) => i.since).sort()[0] ?? null,
    });
    const runbook = ALERT_RUNBOOKS[alert.alert];
    if (runbook)
      actions.push({ code: runbook.action, text: `${runbook.text}.`, runbook: runbook.runbook, replicas: where });
  }

  const status: ClusterStatus = reasons.some((r) => r.severity === 'unavailable')
    ? 'unavailable'
    : reasons.some((r) => r.severity === 'degraded')
      ? 'degraded'
      : 'healthy';
  return { status, headline: headline(status, input, unavailable), reasons, actions };
}

function headline(status: ClusterStatus, input: SituationInput, unavailable: readonly SituationReplica[]): string {
  const { n, t, margin, available } = input;
  const spare = `${margin} more ${plural(margin, 'replica', 'replicas')} may fail`;
  const which = unavailable.length ? ` (${statesOf(unavailable)})` : '';
  if (status === 'unavailable')
    return `Unavailable: acquires are failing. ${available} of ${n} replicas answer honestly, an acquire needs ${t}${which}.`;
  if (status === 'healthy') return `Healthy: all ${n} replicas answer, acquires work and ${spare}.`;
  if (margin === 0) return `Degraded: acquires work, but one more replica lost stops them${which}.`;
  if (unavailable.length > 0)
    return `Degraded: acquires work and ${spare}, but not every replica is available${which}.`;
  return `Degraded: acquires work and ${spare}, but see below.`;
}

/** "replica 4 is faulty; replicas 1 and 3 are down", worst first. */
function statesOf(unavailable: readonly SituationReplica[]): string {
  const word = (r: SituationReplica) =>
    r.faulty !== null
      ? 'faulty'
      : r.unreachableAs === 'hung'
        ? 'hung'
        : r.unreachableAs === 'login_refused'
          ? 'refusing the console'
          : 'down';
  const groups = new Map<string, number[]>();
  for (const index of worstFirst(unavailable)) {
    const w = word(unavailable.find((r) => r.replica === index)!);
    groups.set(w, [...(groups.get(w) ?? []), index]);
  }
  return [...groups]
    .map(
      ([w, replicas]) =>
        `${plural(replicas.length, 'replica', 'replicas')} ${list(replicas, 'and')} ${plural(replicas.length, 'is', 'are')} ${w}`,
    )
    .join('; ');
}
