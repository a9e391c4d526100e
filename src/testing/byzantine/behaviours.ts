/**
 * The names of the Byzantine replica behaviours (docs/protocol.md, Faults), what
 * each one does, and their parameters. Pure: no I/O. The behaviours are
 * carried out by `ByzantineFront` (front.ts) in the separate entry point
 * `nodes/byzantine-replica.ts`; the production replica has no such switch.
 */
import { QuorumFenceError } from '../../common/errors.js';

export const BYZANTINE_BEHAVIOURS = [
  'equivocate',
  'wrong-share',
  'garbage',
  'identity',
  'replay',
  'other-replica',
  'lie-epoch-huge',
  'lie-epoch-zero',
  'silent',
  'slow',
  'flood',
  'malformed',
  'drop',
  'ignore-release',
  'no-record',
] as const;

export type ByzantineBehaviour = (typeof BYZANTINE_BEHAVIOURS)[number];

/** What each behaviour does to a request it is chosen for (one line each, for --help and the README). */
export const BEHAVIOUR_DESCRIPTIONS: Readonly<Record<ByzantineBehaviour, string>> = {
  equivocate:
    'grants every acquire: a refusal of the real record (stale, busy, too_far) becomes a valid partial for whoever asked',
  'wrong-share': 'a granted partial is signed with a random key instead of the share',
  garbage: 'a granted partial is 96 random bytes',
  identity: 'a granted partial is the identity point of G2',
  replay: 'a granted partial is one sent earlier for another grant',
  'other-replica': "a granted partial is signed with another replica's share (--other-key)",
  'lie-epoch-huge':
    'status, stale, busy, too_far and not_holder answers report epoch 2^63-1 (status also says leased); leases lists a phantom lease and every lease at that epoch',
  'lie-epoch-zero':
    'status, stale, too_far and not_holder answers report epoch 0 (busy reports 1; status says not leased); leases lists none',
  silent: 'the request is accepted and never answered (nor passed to the real replica)',
  slow: 'the answer leaves after --slow',
  flood: 'the answer comes with --flood extra frames: duplicates, replies to unknown ids, error frames',
  malformed: 'the answer is replaced by a malformed frame (random bytes, text, wrong version, bad fields)',
  drop: 'the request reaches the real replica, then the connection is dropped before the answer',
  'ignore-release': 'a release is answered "released" and never reaches the real replica: the lease keeps running',
  'no-record':
    'the process-wide signing record lives in a directory wiped at every start, so after a restart it signs again',
};

/** Behaviours that act on the whole process, not on single requests. */
export const PROCESS_BEHAVIOURS: ReadonlySet<ByzantineBehaviour> = new Set(['no-record']);

/**
 * Parses a comma-separated list of behaviour names ("" or "none" is the empty list).
 * @throws QuorumFenceError INVALID_OPTION naming the unknown name
 */
export function parseBehaviours(text: string, flag = 'behaviour'): ByzantineBehaviour[] {
  const names = text
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '' && name !== 'none');
  const out: ByzantineBehaviour[] = [];
  for (const name of names) {
    if (!(BYZANTINE_BEHAVIOURS as readonly string[]).includes(name)) {
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--${flag}: unknown behaviour "${name}" (known: ${BYZANTINE_BEHAVIOURS.join(', ')})`,
        { field: flag },
      );
    }
    if (!out.includes(name as ByzantineBehaviour)) out.push(name as ByzantineBehaviour);
  }
  return out;
}

/** Tunables of the behaviours, in one object with named defaults. */
export interface ByzantineParams {
  /** Probability that a request is handled by one of the chosen behaviours at all (else honestly). */
  readonly rate: number;
  /** Delay of every answer under `slow`. */
  readonly slowMs: number;
  /** Extra frames per answer under `flood`. */
  readonly floodCount: number;
  /** How far SIGUSR2 (or the control endpoint without a value) jumps the replica's clock. */
  readonly clockJumpMs: number;
}

export const DEFAULT_BYZANTINE_PARAMS: ByzantineParams = {
  rate: 1,
  // Past the client's straggler wait (20 ms) and its usual round, below its 2 s request timeout: slow, not dead.
  slowMs: 500,
  // A hundred frames per answer is a flood for a client, yet cheap enough to run inside a test.
  floodCount: 100,
  // The replica's default maxTtl: one jump ends every lease it holds.
  clockJumpMs: 60_000,
};

/**
 * Checks a params override (from flags or the control endpoint).
 * @throws QuorumFenceError INVALID_ARGUMENT naming the field
 */
export function byzantineParams(
  overrides: Partial<ByzantineParams> = {},
  base: ByzantineParams = DEFAULT_BYZANTINE_PARAMS,
): ByzantineParams {
  const params = {
    ...base,
    ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)),
  } as ByzantineParams;
  const bad = (field: string, message: string): never => {
    throw new QuorumFenceError('INVALID_ARGUMENT', `byzantine "${field}" ${message}`, { field });
  };
  if (typeof params.rate !== 'number' || !(params.rate >= 0 && params.rate <= 1))
    bad('rate', `expected a number in 0..1, got ${String(params.rate)}`);
  for (const field of ['slowMs', 'floodCount', 'clockJumpMs'] as const) {
    const value = params[field];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0 || value > 0x7fff_ffff)
      bad(field, `expected an integer in 0..2^31-1, got ${String(value)}`);
  }
  return params;
}

/**
 * The behaviour one request is handled by: with chance `rate`, one of `behaviours` picked by the seeded PRNG (so a
 * seed replays the choice); undefined means honestly.
 */
export function pickBehaviour(
  random: { chance(p: number): boolean; pick<T>(items: readonly T[]): T },
  behaviours: readonly ByzantineBehaviour[],
  rate: number,
): ByzantineBehaviour | undefined {
  if (behaviours.length === 0) return undefined;
  if (rate < 1 && !random.chance(rate)) return undefined;
  return random.pick(behaviours);
}
