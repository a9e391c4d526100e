/**
 * The bytes a Byzantine replica puts where a partial signature belongs:
 * a real partial for a grant its record refused (equivocation), one under a
 * random key or another replica's share, random bytes, the identity point, or
 * a partial it sent earlier for another grant.
 */
import { randomBytes } from 'node:crypto';
import type { BlsBackend, SecretKey } from '../../crypto/backend.js';
import { SECRET_KEY_BYTES, SIGNATURE_BYTES } from '../../crypto/backend.js';
import { grantMessage, type Grant } from '../../token/grant.js';
import type { ReplicaKey } from '../../cluster/replica-key.js';

/** Partials remembered for `replay`; a few dozen is plenty to always have one for another grant. */
const REPLAY_MEMORY = 64;

/** The compressed encoding of the identity of G2: the infinity flag, then zeros. */
export function identityPointBytes(): Uint8Array {
  const bytes = new Uint8Array(SIGNATURE_BYTES);
  bytes[0] = 0xc0;
  return bytes;
}

export class PartialForger {
  readonly #backend: BlsBackend;
  readonly #own: SecretKey;
  readonly #other: Pick<ReplicaKey, 'secretKey'> | undefined;
  readonly #sent: { digest: string; partial: Uint8Array }[] = [];
  readonly #random: (length: number) => Uint8Array;

  /** @param random bytes for the wrong keys and garbage (default: the OS's; the simulator's are seeded). */
  constructor(
    backend: BlsBackend,
    own: Pick<ReplicaKey, 'secretKey'>,
    other?: Pick<ReplicaKey, 'secretKey'>,
    random: (length: number) => Uint8Array = (length) => new Uint8Array(randomBytes(length)),
  ) {
    this.#backend = backend;
    this.#own = own.secretKey;
    this.#other = other;
    this.#random = random;
  }

  get hasOtherKey(): boolean {
    return this.#other !== undefined;
  }

  /** The replica's own, valid partial: what an honest replica sends, here for a grant its record may have refused. */
  sign(grant: Grant): Uint8Array {
    return this.#backend.sign(this.#own, grantMessage(grant)).bytes;
  }

  /** A partial under a fresh random key (a well-formed point that verifies under no share). */
  wrongShare(grant: Grant): Uint8Array {
    for (;;) {
      try {
        return this.#backend.sign(this.#backend.secretKeyFromBytes(this.#random(SECRET_KEY_BYTES)), grantMessage(grant))
          .bytes;
      } catch {
        // A random 32-byte string is at or above the group order about half the time; draw again.
      }
    }
  }

  garbage(): Uint8Array {
    return this.#random(SIGNATURE_BYTES);
  }

  identity(): Uint8Array {
    return identityPointBytes();
  }

  /** A partial under another replica's share (undefined when no other key was given). */
  otherReplica(grant: Grant): Uint8Array | undefined {
    return this.#other && this.#backend.sign(this.#other.secretKey, grantMessage(grant)).bytes;
  }

  /** Remembers a partial that left, for later replays. */
  remember(grant: Grant, partial: Uint8Array): void {
    this.#sent.push({ digest: grantKey(grant), partial });
    if (this.#sent.length > REPLAY_MEMORY) this.#sent.shift();
  }

  /** A partial sent earlier for a different grant (undefined when there is none yet). */
  replay(grant: Grant, pick: (count: number) => number): Uint8Array | undefined {
    const key = grantKey(grant);
    const others = this.#sent.filter((s) => s.digest !== key);
    return others.length === 0 ? undefined : others[pick(others.length)]!.partial;
  }
}

function grantKey(grant: Grant): string {
  return `${grant.resource}\u0000${grant.epoch}\u0000${Buffer.from(grant.holder).toString('hex')}`;
}
