/**
 * Bracha's reliable broadcast, one instance (one sender's complaint, or one
 * dealer's justification), as a pure step function:
 *   (state, message) → { state, outgoing, delivered }.
 * Values are opaque ids (the ceremony uses the SHA-256 of the signed body);
 * which bytes they stand for, and that the sender signed them, is the
 * caller's business (broadcast-ledger.ts).
 *
 * With n voters of which at most f are Byzantine (n ≥ 3f+1), a voter
 *   - echoes the first value it sees from the sender (once per instance);
 *   - sends ready for v on ⌈(n+f+1)/2⌉ echoes of v, or on f+1 readies of v
 *     (at least one of them honest), once per instance;
 *   - delivers v on 2f+1 readies of v.
 * Only each voter's first echo and first ready count, so the state is
 * bounded by the number of voters. The guarantees (docs/ceremony.md,
 * "Reliable broadcast"): two honest voters never deliver different values;
 * if one honest participant delivers, every honest one does once the honest
 * voters' messages arrive; a value sent by an honest sender is the only one
 * that can be delivered, and it is, once its messages arrive.
 */

/** The counts one value needs for each step. */
export interface BroadcastQuorums {
  /** Echoes of one value that make a voter send ready: ⌈(n+f+1)/2⌉, 2f+1 when n = 3f+1. */
  readonly echo: number;
  /** Readies of one value that make a voter send ready too: f+1, so at least one honest voter sent it. */
  readonly amplify: number;
  /** Readies of one value that deliver it: 2f+1, so f+1 honest voters sent it and every honest voter will. */
  readonly deliver: number;
}

/**
 * The thresholds for n voters of which at most f are Byzantine.
 * @throws RangeError unless n ≥ 3f+1 and f ≥ 0 (whole numbers)
 */
export function broadcastQuorums(n: number, f: number): BroadcastQuorums {
  if (!Number.isSafeInteger(n) || !Number.isSafeInteger(f) || f < 0 || n < 3 * f + 1)
    throw new RangeError(`reliable broadcast needs n >= 3f+1 voters, got n = ${n}, f = ${f}`);
  return { echo: Math.ceil((n + f + 1) / 2), amplify: f + 1, deliver: 2 * f + 1 };
}

/** One instance as one participant sees it. */
export interface InstanceState {
  /** The value this participant echoed, once it has. */
  readonly echoed: string | undefined;
  /** The value this participant sent ready for, once it has. */
  readonly readied: string | undefined;
  /** The value delivered, once it is. */
  readonly delivered: string | undefined;
  /** The first echo of each voter, by voter. */
  readonly echoes: ReadonlyMap<number, string>;
  /** The first ready of each voter, by voter. */
  readonly readies: ReadonlyMap<number, string>;
}

export const EMPTY_INSTANCE: InstanceState = {
  echoed: undefined,
  readied: undefined,
  delivered: undefined,
  echoes: new Map(),
  readies: new Map(),
};

/**
 * What reaches an instance: `initial` is the first sight of a value the sender signed (directly or relayed);
 * `echo` and `ready` come from a voter (this participant's own included, once it sends them).
 */
export type BroadcastMessage =
  | { readonly kind: 'initial'; readonly value: string }
  | { readonly kind: 'echo' | 'ready'; readonly from: number; readonly value: string };

/** Who counts and whether this participant takes part. */
export interface BroadcastRole {
  readonly quorums: BroadcastQuorums;
  /** True for the voters (the ceremony's members); messages of anyone else are ignored. */
  isVoter(from: number): boolean;
  /** Whether this participant echoes and sends ready (a member), or only listens (a reshare's outside dealer). */
  readonly votes: boolean;
}

export interface BroadcastStep {
  readonly state: InstanceState;
  /** What this participant sends to every participant (and applies to itself, when it votes). */
  readonly outgoing: readonly { readonly kind: 'echo' | 'ready'; readonly value: string }[];
  /** The value delivered by this step, if this step delivered it. */
  readonly delivered: string | undefined;
}

function count(votes: ReadonlyMap<number, string>, value: string): number {
  let n = 0;
  for (const v of votes.values()) if (v === value) n++;
  return n;
}

function withVote(votes: ReadonlyMap<number, string>, from: number, value: string): ReadonlyMap<number, string> {
  const next = new Map(votes);
  next.set(from, value);
  return next;
}

/** Applies one message to one instance. Pure: `state` is not changed; an ignored message returns it as is. */
export function stepBroadcast(role: BroadcastRole, state: InstanceState, message: BroadcastMessage): BroadcastStep {
  const unchanged: BroadcastStep = { state, outgoing: [], delivered: undefined };
  if (message.kind === 'initial') {
    if (!role.votes || state.echoed !== undefined) return unchanged;
    return {
      state: { ...state, echoed: message.value },
      outgoing: [{ kind: 'echo', value: message.value }],
      delivered: undefined,
    };
  }
  const { from, value } = message;
  if (!role.isVoter(from)) return unchanged;
  const { quorums } = role;
  if (message.kind === 'echo') {
    if (state.echoes.has(from)) return unchanged;
    const echoes = withVote(state.echoes, from, value);
    const ready = role.votes && state.readied === undefined && count(echoes, value) >= quorums.echo;
    return {
      state: { ...state, echoes, readied: ready ? value : state.readied },
      outgoing: ready ? [{ kind: 'ready', value }] : [],
      delivered: undefined,
    };
  }
  if (state.readies.has(from)) return unchanged;
  const readies = withVote(state.readies, from, value);
  const readyCount = count(readies, value);
  const ready = role.votes && state.readied === undefined && readyCount >= quorums.amplify;
  const deliver = state.delivered === undefined && readyCount >= quorums.deliver;
  return {
    state: {
      ...state,
      readies,
      readied: ready ? value : state.readied,
      delivered: deliver ? value : state.delivered,
    },
    outgoing: ready ? [{ kind: 'ready', value }] : [],
    delivered: deliver ? value : undefined,
  };
}
