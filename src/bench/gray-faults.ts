/**
 * The gray faults themselves: what `--gray` names (its parsing, what each
 * fault emulates, which etcd gets), and the drivers that strike a process and
 * lift the fault again (SIGSTOP and its check in /proc; quorumfence's gray
 * replica slowed at the proxies, made Byzantine, or its flushes slowed). Apart
 * from gray.ts because they are the faults, not the loops run under them nor
 * the figures kept: the CLI reads the catalogue alone, and both sides' loops
 * strike processes the same way.
 */
import { readFileSync } from 'node:fs';
import { QuorumFenceError } from '../common/errors.js';
import { parseDuration } from '../command/args.js';
import type { LocalReplica } from '../cluster/launcher.js';
import { byzantineEntryPoint, controlByzantine } from '../testing/byzantine/control.js';
import { MAX_RTT_MS, type DelayedNetwork } from './network.js';
import type { SlowFlush } from './slow-flush.js';
import type { OddReplica } from './system-processes.js';

export const GRAY_FAULT_KINDS = ['slow-link', 'hung', 'byzantine-slow', 'slow-flush'] as const;
export type GrayFaultKind = (typeof GRAY_FAULT_KINDS)[number];

/** A fault's delay when its name gives none: the 50 ms. */
export const DEFAULT_GRAY_MS = 50;

/** What each fault emulates and how (for --help, the JSON and docs/performance.md), and whether etcd gets it. */
export const GRAY_FAULTS: Readonly<
  Record<GrayFaultKind, { readonly takesMs: boolean; readonly etcd: boolean; readonly emulates: string }>
> = {
  'slow-link': {
    takesMs: true,
    etcd: true,
    emulates:
      "a slow network at one node: every link of it MS slower each way at the delay proxies (its client links; etcd's peer links too, those it accepts and those it dials)",
  },
  hung: {
    takesMs: false,
    etcd: true,
    emulates:
      'a hung node: SIGSTOP of its process after the warm-up (connections stay open, nothing answers), SIGCONT at the end',
  },
  'byzantine-slow': {
    takesMs: true,
    etcd: false,
    emulates:
      "a Byzantine replica that answers late: the project's Byzantine replica process, behaviour slow on every request (every answer correct, MS late)",
  },
  'slow-flush': {
    takesMs: true,
    etcd: false,
    emulates:
      "a slow disk: every flush of the replica's process (fsync, fdatasync, msync) waits MS first, by a library preloaded into it (LD_PRELOAD); LMDB and the flush barrier are the real ones",
  },
};

/** Why etcd has no run for a fault. */
export const ETCD_HAS_NO: Partial<Record<GrayFaultKind, string>> = {
  'byzantine-slow': 'quorumfence only: etcd (Raft) does not tolerate a Byzantine member',
  'slow-flush': "quorumfence only: etcd is a static Go binary, its flushes out of a preloaded library's reach",
};

export interface GrayFault {
  readonly kind: GrayFaultKind;
  /** The delay of slow-link, byzantine-slow and slow-flush, ms. */
  readonly ms?: number;
  /** As it is written: `slow-link:50ms`, `hung`. */
  readonly name: string;
}

/**
 * `--gray slow-link:50ms,hung,...`: the faults, in the order given. A fault that takes a delay defaults to
 * DEFAULT_GRAY_MS.
 * @throws QuorumFenceError INVALID_OPTION for an empty list, an unknown fault, a delay on hung, a delay that is
 *   not a duration in 1..MAX_RTT_MS ms, or a fault named twice
 */
export function parseGrayFaults(value: string): GrayFault[] {
  const items = value.split(',').map((item) => item.trim());
  if (items.some((item) => item === ''))
    throw new QuorumFenceError('INVALID_OPTION', `--gray expects a list like slow-link:50ms,hung, got "${value}"`);
  const faults = items.map((item): GrayFault => {
    const colon = item.indexOf(':');
    const kind = colon < 0 ? item : item.slice(0, colon);
    if (!(GRAY_FAULT_KINDS as readonly string[]).includes(kind))
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--gray: unknown fault "${kind}" (known: ${GRAY_FAULT_KINDS.join(', ')})`,
      );
    const known = kind as GrayFaultKind;
    if (!GRAY_FAULTS[known].takesMs) {
      if (colon >= 0) throw new QuorumFenceError('INVALID_OPTION', `--gray: ${kind} takes no delay, got "${item}"`);
      return { kind: known, name: kind };
    }
    const ms = colon < 0 ? DEFAULT_GRAY_MS : parseDuration(item.slice(colon + 1), 'gray', DEFAULT_GRAY_MS);
    if (!(ms >= 1 && ms <= MAX_RTT_MS))
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--gray: ${kind}'s delay must be 1 ms to ${MAX_RTT_MS} ms, got "${item}"`,
      );
    return { kind: known, ms, name: `${kind}:${ms}ms` };
  });
  const kinds = faults.map((f) => f.kind);
  const twice = kinds.find((kind, k) => kinds.indexOf(kind) !== k);
  if (twice) throw new QuorumFenceError('INVALID_OPTION', `--gray names ${twice} twice: "${value}"`);
  return faults;
}

/** What a fault emulates, its MS filled in. */
export function grayEmulates(fault: GrayFault): string {
  return GRAY_FAULTS[fault.kind].emulates.replace(/\bMS\b/g, `${fault.ms ?? 0} ms`);
}

/** A process's state letter from /proc (T: stopped), or undefined when it cannot be read. */
function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

/** Stops `pid` (SIGSTOP) and waits, briefly, until /proc shows it stopped. */
export async function stopProcess(pid: number): Promise<boolean> {
  process.kill(pid, 'SIGSTOP');
  for (let k = 0; k < 50; k++) {
    if (processState(pid) === 'T') return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return false;
}

/** How the gray replica is started for `fault`, and what switches the fault on and off. */
export interface QuorumfenceFault {
  readonly odd?: OddReplica;
  begin(replica: LocalReplica, network: DelayedNetwork): Promise<{ stopped?: boolean }>;
  end(replica: LocalReplica, network: DelayedNetwork): Promise<void>;
}

export function quorumfenceFault(fault: GrayFault, index: number, slowFlush: SlowFlush | undefined): QuorumfenceFault {
  const ms = fault.ms ?? 0;
  switch (fault.kind) {
    case 'slow-link':
      return {
        begin: async (replica, network) => {
          await network.slowNode({ urls: [replica.url], fromPid: replica.pid, extraOneWayMs: ms });
          return {};
        },
        end: async (replica, network) => void (await network.slowNode({ urls: [replica.url], extraOneWayMs: 0 })),
      };
    case 'hung':
      return {
        begin: async (replica) => ({ stopped: await stopProcess(replica.pid) }),
        end: async (replica) => void (await replica.kill('SIGCONT')),
      };
    case 'byzantine-slow':
      return {
        // Honest (no behaviour) until the fault begins: its healthy runs go through the same front.
        odd: { index, entry: byzantineEntryPoint(), extraArgs: ['--slow', `${ms}ms`] },
        begin: async (replica) => {
          await controlByzantine(replica.url, { behaviours: ['slow'], slowMs: ms, rate: 1 });
          return {};
        },
        end: async (replica) => void (await controlByzantine(replica.url, { behaviours: [] })),
      };
    case 'slow-flush':
      return {
        odd: { index, env: slowFlush!.env },
        begin: async () => {
          slowFlush!.set(ms);
          return {};
        },
        end: async () => slowFlush!.set(0),
      };
  }
}
