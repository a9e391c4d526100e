/**
 * The Byzantine front's lies: given a request, the behaviour chosen for it and the real replica's honest
 * answer, what the client is sent instead (a forged or replayed partial, a lying epoch or lease list, a slow,
 * flooded, malformed or dropped answer). The relay that calls it is front.ts.
 *
 * Test use only: this signs whatever it is told to.
 */
import { pack } from 'msgpackr';
import { MAX_EPOCH } from '../../common/limits.js';
import { encodeMessage } from '../../protocol/codec.js';
import { MAX_LEASES_PER_REPLY, PROTOCOL_VERSION, type WireRequest } from '../../protocol/messages.js';
import type { Grant } from '../../token/grant.js';
import type { SeededRandom } from '../seeded-random.js';
import type { ByzantineBehaviour, ByzantineParams } from './behaviours.js';
import type { PartialForger } from './forge.js';

/** A request relayed to the real replica, with the behaviour chosen for its answer. */
export interface Pending {
  readonly request: WireRequest;
  readonly behaviour: ByzantineBehaviour | undefined;
}

export type Outcome = Record<string, unknown>;

/** What the lies read from the front: the cluster, the forger, the seeded PRNG, the parameters now in force. */
export interface BehaviourContext {
  readonly clusterId: Uint8Array;
  readonly forger: PartialForger;
  readonly random: SeededRandom;
  readonly params: ByzantineParams;
  /** Counts that `behaviour` changed what a client saw (GET /byzantine's `acts`). */
  readonly act: (behaviour: ByzantineBehaviour) => void;
  /** Runs `run` after `ms` (default: a real timer; the simulator's runs on virtual time). */
  readonly later?: (ms: number, run: () => void) => void;
}

/** Applies the request's behaviour to the real replica's answer and sends what the client should see. */
export function answerWithBehaviour(
  entry: Pending,
  outcome: Outcome,
  holder: Uint8Array,
  honestFrame: Uint8Array,
  io: { toClient: (data: Uint8Array | string) => void; drop: () => void },
  context: BehaviourContext,
): void {
  const { request, behaviour } = entry;
  const reply = (o: Outcome) => encodeMessage({ type: 'reply', id: request.id, outcome: o });
  if (request.type === 'leases') {
    const lied =
      behaviour === 'lie-epoch-huge' || behaviour === 'lie-epoch-zero'
        ? lieAboutLeases(outcome, behaviour === 'lie-epoch-huge')
        : undefined;
    if (!lied) return io.toClient(honestFrame);
    context.act(behaviour!);
    return io.toClient(reply(lied));
  }
  const grant = (): Grant => ({
    clusterId: context.clusterId,
    resource: request.resource,
    epoch: (request as { epoch: bigint }).epoch,
    holder,
  });
  const granted = request.type === 'acquire' && outcome.status === 'granted';
  const forger = context.forger;
  if (granted) forger.remember(grant(), outcome.partial as Uint8Array);

  const withPartial = (partial: Uint8Array | undefined): void => {
    if (!granted || !partial) return io.toClient(honestFrame);
    context.act(behaviour!);
    io.toClient(reply({ status: 'granted', partial }));
  };

  switch (behaviour) {
    case 'equivocate': {
      const refused =
        request.type === 'acquire' &&
        (outcome.status === 'stale' || outcome.status === 'busy' || outcome.status === 'too_far');
      if (!refused) return io.toClient(honestFrame);
      context.act('equivocate');
      const partial = forger.sign(grant());
      forger.remember(grant(), partial);
      return io.toClient(reply({ status: 'granted', partial }));
    }
    case 'wrong-share':
      return withPartial(granted ? forger.wrongShare(grant()) : undefined);
    case 'garbage':
      return withPartial(forger.garbage());
    case 'identity':
      return withPartial(forger.identity());
    case 'replay':
      return withPartial(granted ? forger.replay(grant(), (n) => context.random.int(0, n - 1)) : undefined);
    case 'other-replica':
      return withPartial(
        granted
          ? (forger.otherReplica(grant()) ?? forger.replay(grant(), (n) => context.random.int(0, n - 1)))
          : undefined,
      );
    case 'lie-epoch-huge':
    case 'lie-epoch-zero': {
      const lied = lieAboutEpoch(outcome, behaviour === 'lie-epoch-huge');
      if (!lied) return io.toClient(honestFrame);
      context.act(behaviour);
      return io.toClient(reply(lied));
    }
    case 'slow': {
      context.act('slow');
      const later = context.later ?? ((ms: number, run: () => void) => setTimeout(run, ms).unref());
      later(context.params.slowMs, () => io.toClient(honestFrame));
      return;
    }
    case 'flood': {
      context.act('flood');
      io.toClient(honestFrame);
      for (let k = 0; k < context.params.floodCount; k++) {
        const kind = k % 3;
        if (kind === 0) io.toClient(honestFrame);
        else if (kind === 1)
          io.toClient(
            encodeMessage({ type: 'reply', id: (request.id + 1 + context.random.int(1, 1 << 30)) >>> 0, outcome }),
          );
        else io.toClient(encodeMessage({ type: 'error', code: 'INTERNAL', message: 'flood' }));
      }
      return;
    }
    case 'malformed': {
      context.act('malformed');
      return io.toClient(malformedFrame(request.id, context.random));
    }
    case 'drop': {
      context.act('drop');
      return io.drop();
    }
    default:
      // silent and ignore-release act on the request; no-record on the process.
      return io.toClient(honestFrame);
  }
}

function malformedFrame(id: number, random: SeededRandom): Uint8Array | string {
  switch (random.int(0, 4)) {
    case 0:
      // 0xc1 is the one byte msgpack never uses.
      return new Uint8Array([0xc1, ...Array.from({ length: 15 }, () => random.int(0, 255))]);
    case 1:
      return 'a text frame';
    case 2:
      return new Uint8Array(pack({ v: PROTOCOL_VERSION + 1, type: 'reply', id, outcome: { status: 'released' } }));
    case 3:
      return encodeMessage({ type: 'reply', id, outcome: { status: 'granted', partial: new Uint8Array(7) } });
    default:
      return new Uint8Array(pack({ v: PROTOCOL_VERSION, type: 'surprise', id }));
  }
}

/** The lying version of an outcome, or undefined when it carries no epoch to lie about. */
function lieAboutEpoch(outcome: Outcome, huge: boolean): Outcome | undefined {
  const epoch = huge ? MAX_EPOCH : 0n;
  switch (outcome.status) {
    case 'ok':
      return huge
        ? { status: 'ok', epoch, leased: true, remainingMs: 60_000 }
        : { status: 'ok', epoch, leased: false, remainingMs: 0 };
    case 'stale':
    case 'too_far':
    case 'not_holder':
      return { status: outcome.status, epoch };
    case 'busy':
      // A busy answer's epoch is at least 1 on the wire.
      return { status: 'busy', epoch: huge ? epoch : 1n, remainingMs: huge ? 60_000 : 0 };
    default:
      return undefined;
  }
}

/** A phantom resource the lying `leases` answer adds, so a console sees the lie even on an idle cluster. */
export const PHANTOM_LEASE_RESOURCE = 'byzantine/phantom';

/**
 * The lying version of a `leases` answer: huge reports every lease at epoch 2^63-1 and adds a phantom lease
 * nobody was granted; zero hides every lease.
 */
function lieAboutLeases(outcome: Outcome, huge: boolean): Outcome | undefined {
  if (outcome.status !== 'leases' || !Array.isArray(outcome.leases)) return undefined;
  if (!huge) return { status: 'leases', leases: [], more: false };
  const listed = (outcome.leases as Record<string, unknown>[]).map((lease) => ({ ...lease, epoch: MAX_EPOCH }));
  const phantom = {
    resource: PHANTOM_LEASE_RESOURCE,
    epoch: MAX_EPOCH,
    holder: new Uint8Array(32).fill(7),
    remainingMs: 60_000,
  };
  return { status: 'leases', leases: [phantom, ...listed].slice(0, MAX_LEASES_PER_REPLY), more: outcome.more === true };
}
