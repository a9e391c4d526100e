/**
 * What changed between two polls, as log events (docs/console.md, "Logs"): the status line, a replica lost or back, a
 * replica proven faulty, the margin, an alert that starts or stops firing. Pure; the watcher logs them with
 * pino under these stable field names.
 */
import type { AlertState } from './alerts.js';

export interface ChangeSnapshot {
  readonly margin: number;
  readonly replicas: readonly {
    readonly replica: number;
    readonly reachable: boolean;
    readonly connection: string;
    readonly faulty: string | null;
  }[];
  readonly alerts: readonly AlertState[];
  /** The status line's word and sentence (situation.ts). */
  readonly status?: string;
  readonly headline?: string;
}

export type ChangeEvent =
  | 'status_changed'
  | 'replica_unreachable'
  | 'replica_reachable'
  | 'replica_faulty'
  | 'margin_changed'
  | 'alert_firing'
  | 'alert_resolved';

export interface ConsoleChange {
  readonly level: 'info' | 'warn' | 'error';
  readonly event: ChangeEvent;
  readonly fields: Readonly<Record<string, string | number | null>>;
  readonly message: string;
}

/** The changes from `before` (undefined at the first poll: everything not healthy is news) to `after`. */
export function stateChanges(before: ChangeSnapshot | undefined, after: ChangeSnapshot): ConsoleChange[] {
  const changes: ConsoleChange[] = [];
  if (after.status !== undefined && before?.status !== after.status)
    changes.push({
      level: after.status === 'unavailable' ? 'error' : after.status === 'degraded' ? 'warn' : 'info',
      event: 'status_changed',
      fields: { status: after.status, previousStatus: before?.status ?? null, headline: after.headline ?? null },
      message: after.headline ?? `status ${after.status}`,
    });
  for (const row of after.replicas) {
    const was = before?.replicas.find((r) => r.replica === row.replica);
    const replica = row.replica;
    if (!row.reachable && (was ? was.reachable : true))
      changes.push({
        level: 'warn',
        event: 'replica_unreachable',
        fields: { replica, connection: row.connection },
        message: `replica ${replica} is unreachable: ${row.connection}`,
      });
    if (row.reachable && was && !was.reachable)
      changes.push({
        level: 'info',
        event: 'replica_reachable',
        fields: { replica },
        message: `replica ${replica} answers again`,
      });
    if (row.faulty !== null && (was?.faulty ?? null) === null)
      changes.push({
        level: 'error',
        event: 'replica_faulty',
        fields: { replica, reason: row.faulty },
        message: `replica ${replica} is faulty: ${row.faulty}`,
      });
  }
  if (!before || before.margin !== after.margin)
    changes.push({
      level: after.margin < 1 ? 'warn' : 'info',
      event: 'margin_changed',
      fields: { margin: after.margin, previousMargin: before?.margin ?? null },
      message: `quorum margin ${after.margin}`,
    });
  for (const alert of after.alerts) {
    const was = before?.alerts.find((a) => a.alert === alert.alert)?.state;
    if (alert.state === 'firing' && was !== 'firing')
      changes.push({
        level: alert.severity === 'critical' ? 'error' : 'warn',
        event: 'alert_firing',
        fields: { alert: alert.alert, severity: alert.severity },
        message: `alert ${alert.alert} would fire`,
      });
    if (alert.state !== 'firing' && was === 'firing')
      changes.push({
        level: 'info',
        event: 'alert_resolved',
        fields: { alert: alert.alert, severity: alert.severity },
        message: `alert ${alert.alert} no longer fires`,
      });
  }
  return changes;
}
