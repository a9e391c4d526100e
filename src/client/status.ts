/**
 * Each replica's view of a resource, for people (the `status` verb) and for
 * monitoring. Nothing here is used to decide: acquire does its own rounds.
 * The summary applies the same (f+1)-th rules, so f lying replicas cannot
 * skew it either.
 */
import type { ConnectionFailure } from './connection-state.js';
import { fPlusOneLargest, quorumRemainingMs } from './epoch-choice.js';
import type { QuorumContext } from './quorum-context.js';
import type { OutcomeByRequest, StatusOutcome } from '../protocol/messages.js';
import { newRoundCall, roundCallCore, type HeardAnswer } from './core/round-call.js';
import { connectionViews, drive } from './drive.js';
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from './replica-channel.js';

export type ReplicaView =
  | {
      readonly replica: number;
      readonly endpoint: string;
      readonly state: 'ok';
      readonly epoch: bigint;
      readonly leased: boolean;
      readonly remainingMs: number;
    }
  | {
      readonly replica: number;
      readonly endpoint: string;
      /** unreachable: not connected; faulty: broke the protocol; refused: answered forbidden or invalid; timeout: connected but silent. */
      readonly state: 'unreachable' | 'faulty' | 'refused' | 'timeout' | 'error';
      readonly message: string;
      /** For unreachable: how the last connection attempt ended. */
      readonly failure?: ConnectionFailure;
    };

export interface ResourceStatus {
  readonly resource: string;
  readonly replicas: readonly ReplicaView[];
  /** The (f+1)-th largest epoch reported, when at least 2f+1 replicas answered; the next acquire would ask for one more. */
  readonly epoch: bigint | undefined;
  /** At least f+1 replicas (so at least one honest) report a lease running. */
  readonly leased: boolean;
  /** With `leased`: the (f+1)-th smallest remaining time reported. */
  readonly remainingMs: number | undefined;
  /** Replicas that answered `ok`. */
  readonly answered: number;
}

export type UnansweredView = Exclude<ReplicaView, { state: 'ok' }>;

/** Why a replica gave no answer in a round: connected but silent (timeout), faulty, or not connected. */
export function unansweredView(ctx: QuorumContext, channel: ReplicaChannel, timeoutMs: number): UnansweredView {
  const endpoint = ctx.cluster.replicas[channel.index - 1]!.endpoint;
  const failure = channel.state.lastFailure;
  if (channel.state.phase === 'ready')
    return { replica: channel.index, endpoint, state: 'timeout', message: `no answer within ${timeoutMs} ms` };
  const state = failure && (failure.kind === 'protocol' || failure.kind === 'bad_challenge') ? 'faulty' : 'unreachable';
  return {
    replica: channel.index,
    endpoint,
    state,
    // The failure's kind once: readers print `${state}: ${message}`, and an unreachable replica's kind is its state.
    message: failure
      ? failure.kind === state
        ? failure.message
        : `${failure.kind}: ${failure.message}`
      : `not connected (${channel.state.phase})`,
    ...(failure ? { failure: failure.kind } : {}),
  };
}

/** The view of an answer that carries no outcome (faulty, timeout, error), or undefined for a reply or one that never came. */
export function failedAnswerView(
  replica: number,
  endpoint: string,
  answer: ReplicaAnswer<RequestKind>,
  timeoutMs: number,
): UnansweredView | undefined {
  switch (answer.kind) {
    case 'faulty':
      return { replica, endpoint, state: 'faulty', message: answer.message };
    case 'timeout':
      return { replica, endpoint, state: 'timeout', message: `no answer within ${timeoutMs} ms` };
    case 'error':
      return { replica, endpoint, state: 'error', message: `${answer.code}: ${answer.message}` };
    default:
      return undefined;
  }
}

/**
 * Asks every replica one read-only request (`status`, `leases`), waiting up to `timeoutMs`, and keeps each answer as
 * a view: `viewOf` for a reply, failedAnswerView for any other answer; `finish` makes the result of the views by
 * replica index (a replica missing from them never answered).
 */
export function askEveryReplica<B extends RequestBody<'status'> | RequestBody<'leases'>, V, R>(
  ctx: QuorumContext,
  body: B,
  timeoutMs: number,
  viewOf: (replica: number, endpoint: string, outcome: OutcomeByRequest[B['type']]) => V,
  finish: (views: ReadonlyMap<number, V | UnansweredView>) => R,
  signal?: AbortSignal,
): Promise<R> {
  const endpoints = ctx.cluster.replicas.map((replica) => replica.endpoint);
  // Each answer as a view, by replica index, in the order the answers came (pure: made again from the answers).
  const viewsOf = (heard: readonly HeardAnswer[]) => {
    const views = new Map<number, V | UnansweredView>();
    for (const { replica, answer } of heard) {
      const endpoint = endpoints[replica - 1]!;
      const view =
        answer.kind === 'reply'
          ? viewOf(replica, endpoint, answer.outcome as OutcomeByRequest[B['type']])
          : failedAnswerView(replica, endpoint, answer, timeoutMs);
      if (view) views.set(replica, view);
    }
    return views;
  };
  const state = newRoundCall({ params: undefined, bodies: { body }, timeoutMs }, connectionViews(ctx), signal?.aborted);
  const core = roundCallCore(state, { result: (_params, heard: readonly HeardAnswer[]) => finish(viewsOf(heard)) });
  return drive(ctx, core, { signal });
}

/** Asks every replica for its view of `resource`, waiting up to `timeoutMs` for answers. */
export function resourceStatus(
  ctx: QuorumContext,
  resource: string,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<ResourceStatus> {
  return askEveryReplica(
    ctx,
    { type: 'status', resource },
    timeoutMs,
    statusView,
    (views) => summarise(ctx, resource, views, timeoutMs),
    signal,
  );
}

function statusView(replica: number, endpoint: string, o: StatusOutcome): ReplicaView {
  return o.status === 'ok'
    ? { replica, endpoint, state: 'ok', epoch: o.epoch, leased: o.leased, remainingMs: o.remainingMs }
    : { replica, endpoint, state: 'refused', message: o.status === 'invalid' ? `invalid: ${o.message}` : 'forbidden' };
}

/** Every replica's view, and the quorum's by the (f+1)-th rules. */
function summarise(
  ctx: QuorumContext,
  resource: string,
  views: ReadonlyMap<number, ReplicaView>,
  timeoutMs: number,
): ResourceStatus {
  const { f } = ctx.cluster;
  const replicas: ReplicaView[] = ctx.channels.channels.map(
    (channel) => views.get(channel.index) ?? unansweredView(ctx, channel, timeoutMs),
  );
  const ok = replicas.filter((v): v is Extract<ReplicaView, { state: 'ok' }> => v.state === 'ok');
  const leasedRemaining = ok.filter((v) => v.leased).map((v) => v.remainingMs);
  const leased = leasedRemaining.length > f;
  return {
    resource,
    replicas,
    epoch:
      ok.length >= 2 * f + 1
        ? fPlusOneLargest(
            ok.map((v) => v.epoch),
            f,
          )
        : undefined,
    leased,
    remainingMs: leased ? quorumRemainingMs(leasedRemaining, f) : undefined,
    answered: ok.length,
  };
}
