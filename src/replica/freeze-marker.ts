/**
 * The reshare freeze marker of a signing record (docs/resharing.md): once written, the store signs nothing
 * more with this share, on this and every later open. Kept in the store's meta table under FROZEN_KEY.
 */
import { QuorumFenceError } from '../common/errors.js';

/** Why and when a store was frozen for a reshare. */
export interface FrozenState {
  readonly at: string;
  readonly reason: string;
}

export const FROZEN_KEY = 'frozen';

/** A marker that is there but unreadable still freezes (the safe side). */
export function readFrozen(text: string | undefined): FrozenState | undefined {
  if (text === undefined) return undefined;
  try {
    const json = JSON.parse(text) as Partial<FrozenState>;
    if (typeof json.at === 'string' && typeof json.reason === 'string') return { at: json.at, reason: json.reason };
  } catch {
    // fall through
  }
  return { at: '(unreadable)', reason: '(unreadable freeze marker)' };
}

export function frozenError(state: FrozenState): QuorumFenceError {
  return new QuorumFenceError(
    'REPLICA_FROZEN',
    `this replica's signing record was frozen for a reshare at ${state.at} (${state.reason}); it signs nothing more with this share`,
  );
}
