/** The connection life cycle as a pure transition function. */
import { describe, expect, it } from 'vitest';
import {
  INITIAL_CONNECTION_STATE,
  isFaultFailure,
  isPending,
  isReady,
  transition,
  type ConnectionEvent,
  type ConnectionState,
} from '../../src/client/connection-state.js';

function run(events: ConnectionEvent[], from: ConnectionState = INITIAL_CONNECTION_STATE): ConnectionState {
  return events.reduce(transition, from);
}

const handshake: ConnectionEvent[] = [{ type: 'socket_open' }, { type: 'challenge_accepted' }, { type: 'welcome' }];

describe('connection state machine', () => {
  it('becomes ready only after open, challenge and welcome, in that order', () => {
    expect(isPending(INITIAL_CONNECTION_STATE)).toBe(true);
    expect(run(handshake).phase).toBe('ready');
    expect(isReady(run(handshake))).toBe(true);
    // Out of order: a welcome before the challenge changes nothing.
    expect(run([{ type: 'socket_open' }, { type: 'welcome' }]).phase).toBe('awaiting_challenge');
    expect(run([{ type: 'challenge_accepted' }]).phase).toBe('connecting');
  });

  it('counts failures for the backoff and resets them once ready', () => {
    const failed = run([{ type: 'failed', kind: 'unreachable', message: 'refused' }]);
    expect(failed).toMatchObject({ phase: 'backoff', failures: 1, lastFailure: { kind: 'unreachable' } });
    expect(isPending(failed) || isReady(failed)).toBe(false);
    const twice = run([{ type: 'retry' }, { type: 'failed', kind: 'handshake_timeout', message: 'slow' }], failed);
    expect(twice.failures).toBe(2);
    const healed = run([{ type: 'retry' }, ...handshake], twice);
    expect(healed).toEqual({ phase: 'ready', failures: 0, lastFailure: undefined });
    expect(run([{ type: 'failed', kind: 'closed', message: 'bye' }], healed).failures).toBe(1);
  });

  it('ignores a second failure and a retry outside backoff (late timers and socket events race)', () => {
    const failed = run([{ type: 'failed', kind: 'closed', message: 'a' }]);
    expect(transition(failed, { type: 'failed', kind: 'protocol', message: 'b' })).toBe(failed);
    const ready = run(handshake);
    expect(transition(ready, { type: 'retry' })).toBe(ready);
  });

  it('close is final', () => {
    const closed = run([{ type: 'close' }]);
    expect(closed.phase).toBe('closed');
    for (const event of [
      ...handshake,
      { type: 'retry' } as const,
      { type: 'failed', kind: 'closed', message: 'x' } as const,
    ]) {
      expect(transition(closed, event)).toBe(closed);
    }
  });

  it('tells replica misbehaviour from network trouble', () => {
    expect(isFaultFailure('protocol')).toBe(true);
    expect(isFaultFailure('bad_challenge')).toBe(true);
    expect(isFaultFailure('unreachable')).toBe(false);
    expect(isFaultFailure('handshake_timeout')).toBe(false);
    expect(isFaultFailure('unauthenticated')).toBe(false);
  });
});
