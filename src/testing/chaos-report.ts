/**
 * What a chaos run (chaos.ts) found, and the table `quorumfence-dev chaos` prints.
 */
import { existsSync } from 'node:fs';
import type { ReshareSummary } from './chaos-reshare.js';

/** The reshare in the middle of a run (`--reshare`). */
export interface ChaosReshareReport {
  /** Whether the replica was replaced and the clients switched; when not, `error` says why and the run fails. */
  readonly done: boolean;
  readonly error?: string;
  readonly summary?: ReshareSummary;
  /** Tokens the workload obtained, by share generation (membershipVersion), and writes the guard accepted with them. */
  readonly tokensByGeneration: Readonly<Record<string, number>>;
  readonly acceptedWritesByGeneration: Readonly<Record<string, number>>;
}

export interface ChaosReport {
  readonly seed: number;
  readonly replicas: number;
  readonly f: number;
  readonly byzantine: readonly number[];
  readonly durationMs: number;
  /** Increments attempted by the workload and the holder. */
  readonly operations: number;
  /** How each increment ended (incremented, not_acquired:<reason>, read:<code>, write:<code>, lease_lost). */
  readonly outcomes: Readonly<Record<string, number>>;
  /** Guard log entries, accepted ones, refusals by reason. */
  readonly guardEntries: number;
  readonly accepted: number;
  readonly refusedByReason: Readonly<Record<string, number>>;
  readonly tokens: number;
  readonly faults: Readonly<Record<string, number>>;
  readonly kills: number;
  /**
   * Writes of holders resumed after a pause: refused by the guard; undelivered (the request never got an answer:
   * unreachable or timeout, so it proves nothing about the fence); the rest were accepted.
   */
  readonly staleHolderWrites: { readonly attempted: number; readonly refused: number; readonly undelivered: number };
  readonly byzantineActs: Readonly<Record<string, number>>;
  readonly byzantineClients: Readonly<Record<string, number>>;
  /** Present when the run was asked to reshare. */
  readonly reshare?: ChaosReshareReport;
  readonly violations: readonly string[];
  /** Counters whose value differs from their number of accepted writes (lost or doubled increments). */
  readonly counterMismatches: readonly string[];
  /**
   * Counters whose final value could not be read, with the code and reason (the run then proves nothing about
   * them, and fails): never reported as a value.
   */
  readonly unreadCounters: readonly string[];
}

/** The report as the table `quorumfence-dev chaos` prints. */
export function formatChaosReport(report: ChaosReport): string {
  const list = (record: Readonly<Record<string, number>>) =>
    Object.entries(record)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none';
  const total = (record: Readonly<Record<string, number>>) => Object.values(record).reduce((a, b) => a + b, 0);
  const paused = report.staleHolderWrites;
  const rows: [string, string][] = [
    ['duration', `${(report.durationMs / 1000).toFixed(1)} s`],
    ['replicas', `${report.replicas} (f = ${report.f}; Byzantine: ${report.byzantine.join(', ')})`],
    ['operations', `${report.operations} increments attempted`],
    ['outcomes', list(report.outcomes)],
    ['guard attempts', `${report.guardEntries}`],
    ['accepted', `${report.accepted}`],
    ['refused by reason', list(report.refusedByReason)],
    ['tokens checked', `${report.tokens}`],
    ['faults injected', `${total(report.faults)} (${list(report.faults)})`],
    ['kills', `${report.kills}`],
    [
      'paused holders',
      `${paused.attempted} resumed and wrote with their old token: ${paused.refused} refused as stale` +
        (paused.undelivered > 0 ? `, ${paused.undelivered} never reached the guard (unreachable or timeout)` : '') +
        (paused.attempted > paused.refused + paused.undelivered
          ? ', the rest accepted (no newer holder had reached the guard)'
          : ''),
    ],
    ['Byzantine acts', list(report.byzantineActs)],
    ['Byzantine clients', list(report.byzantineClients)],
    ...reshareRows(report.reshare),
    [
      'counters',
      report.counterMismatches.length > 0
        ? report.counterMismatches.join('; ')
        : report.unreadCounters.length > 0
          ? 'every value read equals its accepted writes'
          : 'every value equals its accepted writes',
    ],
    ...(report.unreadCounters.length > 0
      ? [['could not read', report.unreadCounters.join('; ')] as [string, string]]
      : []),
    ['violations', `${report.violations.length}`],
    [
      'seed',
      `${report.seed} (replay: quorumfence-dev chaos --seed ${report.seed} --replicas ${report.replicas} --duration ${Math.round(report.durationMs / 1000)}s${report.reshare ? ' --reshare' : ''})`,
    ],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  const lines = rows.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`);
  if (report.violations.length > 0)
    lines.push('', 'violations:', ...report.violations.map((v) => v.replace(/^/gm, '  ')));
  return lines.join('\n');
}

/** Whether the run found nothing wrong: no violation, every counter read and right, the reshare (if asked) done. */
export function chaosReportClean(report: ChaosReport): boolean {
  return (
    report.violations.length === 0 &&
    report.counterMismatches.length === 0 &&
    report.unreadCounters.length === 0 &&
    (report.reshare === undefined || (report.reshare.done && reshareKeptTheCluster(report.reshare)))
  );
}

function reshareKeptTheCluster(reshare: ChaosReshareReport): boolean {
  const s = reshare.summary;
  return s !== undefined && s.clusterIdUnchanged && s.groupKeyUnchanged && s.lostDataDirUnused;
}

function reshareRows(reshare: ChaosReshareReport | undefined): [string, string][] {
  if (!reshare) return [];
  const generations = (record: Readonly<Record<string, number>>) =>
    Object.entries(record)
      .map(([g, count]) => `membership ${g}: ${count}`)
      .join(', ') || 'none';
  const s = reshare.summary;
  if (!s) return [['reshare', `NOT DONE: ${reshare.error ?? 'unknown'}`]];
  const steps = Object.entries(s.steps)
    .map(([name, ms]) => `${name} ${(ms / 1000).toFixed(1)} s`)
    .join(', ');
  return [
    [
      'reshare',
      `replica ${s.replaced}${s.replacedByzantine ? ' (Byzantine)' : ''} replaced at ${(s.atMs / 1000).toFixed(1)} s ` +
        `in ${(s.tookMs / 1000).toFixed(1)} s (${steps}); membership ${s.membershipVersion.before} -> ${s.membershipVersion.after}`,
    ],
    [
      'reshare checks',
      `cluster id ${s.clusterIdUnchanged ? 'unchanged' : 'CHANGED'}, group key ${s.groupKeyUnchanged ? 'unchanged' : 'CHANGED'}, ` +
        `lost data dir ${s.lostDataDirUnused ? 'unused' : 'USED AGAIN'}; dealers ${s.dealers.join(', ')}; ` +
        `Byzantine report ${s.byzantineReport}; ${s.inheritedResources} resources inherited` +
        (s.contested > 0 ? `, ${s.contested} top epoch(s) blocked` : ''),
    ],
    ['tokens by membership', generations(reshare.tokensByGeneration)],
    ['accepted by membership', generations(reshare.acceptedWritesByGeneration)],
  ];
}

/** The reshare's part of the report: what it did, and the tokens and accepted writes of each generation. */
export function reshareReport(
  reshare: { summary?: ReshareSummary; error?: string },
  tokenGenerations: ReadonlyMap<string, number>,
  guardLog: readonly { accepted: boolean; op: string; token: string | null }[],
): ChaosReshareReport {
  const tokensByGeneration: Record<string, number> = {};
  for (const generation of tokenGenerations.values())
    tokensByGeneration[generation] = (tokensByGeneration[generation] ?? 0) + 1;
  const acceptedWritesByGeneration: Record<string, number> = {};
  for (const entry of guardLog) {
    const generation = entry.token === null ? undefined : tokenGenerations.get(entry.token);
    if (entry.accepted && entry.op === 'put' && generation !== undefined)
      acceptedWritesByGeneration[generation] = (acceptedWritesByGeneration[generation] ?? 0) + 1;
  }
  const summary = reshare.summary && {
    ...reshare.summary,
    // Deleted at the reshare's first step; nothing may have written there since.
    lostDataDirUnused:
      !existsSync(reshare.summary.lostDataDir) && reshare.summary.newDataDir !== reshare.summary.lostDataDir,
  };
  return {
    done: summary !== undefined,
    ...(summary ? { summary } : {}),
    ...(reshare.error !== undefined
      ? { error: reshare.error }
      : summary
        ? {}
        : { error: 'the run ended before the reshare began' }),
    tokensByGeneration,
    acceptedWritesByGeneration,
  };
}
