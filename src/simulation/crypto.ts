/**
 * Cryptography for simulated runs (`--crypto sim|real`, docs/testing.md). `sim` keeps the project's backend
 * interface (src/crypto/backend.ts) and its threshold rules, over a stand-in group: the integers modulo the
 * BLS12-381 scalar order r. A secret key is a scalar s, its public key carries s, a signature on m is s·H(m)
 * mod r with H a hash into the scalars, and the real threshold code (Δ-scaled Shamir shares, Lagrange
 * coefficients, `combinePartials`) combines partials exactly as it does on the curve. So a token exists only from
 * t distinct valid partials of the same grant (fewer interpolate a wrong value that does not verify), a partial
 * verifies only under the key share of the replica that made it, and a Byzantine replica can sign anything with
 * its own share. It is not secure (a public key reveals its secret) and must never leave the simulator; it costs
 * a hash and a multiplication where a pairing costs a millisecond.
 *
 * `real` deals a BLS12-381 cluster with the real dealer and the native backend.
 */
import { createHash } from 'node:crypto';
import { QuorumFenceError } from '../common/errors.js';
import { bigIntToBytes, bytesToBigInt, concatBytes } from '../common/bytes.js';
import { CLUSTER_FORMAT, clusterIdOfKey } from '../cluster/cluster-id.js';
import { describeDealtKey, parseCluster, type Cluster } from '../cluster/description.js';
import type {
  BlsBackend,
  CombineTerm,
  PointTerm,
  PublicKey,
  SecretKey,
  Signature,
  SignaturePoint,
  VerificationSet,
} from '../crypto/backend.js';
import { loadBackend } from '../crypto/load.js';
import { seededRandom } from '../crypto/random.js';
import { SCALAR_ORDER, dealKey, delta, invert, mod } from '../crypto/threshold.js';
import { VerifyBatcher, installVerifyBatcher } from '../crypto/verify-batch.js';
import { toHex, u64be } from '../common/bytes.js';

export type CryptoMode = 'sim' | 'real';

const PUBLIC_KEY_TAG = new TextEncoder().encode('quorumfence/sim'); // 15 bytes, then a zero: 16
const SIGNATURE_TAG = new Uint8Array(64).fill(0x5a);

class SimKey implements PublicKey, SecretKey {
  readonly backend = 'sim' as const;
  constructor(
    readonly scalar: bigint,
    readonly bytes: Uint8Array,
  ) {}
}

class SimSignature implements Signature {
  readonly backend = 'sim' as const;
  readonly inSubgroup = true as const;
  constructor(
    readonly value: bigint,
    readonly bytes: Uint8Array,
  ) {}
}

/** The stand-in group has no points outside it: a point is a signature that has not been through checkSignature. */
class SimSignaturePoint implements SignaturePoint {
  readonly backend = 'sim' as const;
  readonly inSubgroup = false as const;
  constructor(readonly signature: SimSignature) {}
  get bytes(): Uint8Array {
    return this.signature.bytes;
  }
}

function keyOf(scalar: bigint): SimKey {
  return new SimKey(scalar, concatBytes(PUBLIC_KEY_TAG, new Uint8Array(1), bigIntToBytes(scalar, 32)));
}

function signatureOf(value: bigint): SimSignature {
  return new SimSignature(value, concatBytes(SIGNATURE_TAG, bigIntToBytes(value, 32)));
}

/** The message's image in the scalars (never 0, so no key signs everything to one value). */
function hashToScalar(message: Uint8Array): bigint {
  const digest = createHash('sha256').update(message).digest();
  const value = mod(bytesToBigInt(digest));
  return value === 0n ? 1n : value;
}

function own<T>(value: unknown, type: abstract new (...args: never[]) => T, what: string): T {
  if (!(value instanceof type))
    throw new QuorumFenceError('INVALID_ARGUMENT', `${what} was not made by the sim backend`);
  return value;
}

function decodeScalar(bytes: Uint8Array, tag: Uint8Array, length: number, field: string): bigint {
  if (!(bytes instanceof Uint8Array) || bytes.length !== length)
    throw new QuorumFenceError('BAD_LENGTH', `"${field}" expected ${length} bytes`, { field });
  for (let i = 0; i < tag.length; i++)
    if (bytes[i] !== tag[i])
      throw new QuorumFenceError('POINT_NOT_CANONICAL', `"${field}" is not canonical`, { field });
  const value = bytesToBigInt(bytes.subarray(length - 32));
  if (value >= SCALAR_ORDER)
    throw new QuorumFenceError('POINT_NOT_CANONICAL', `"${field}" is not canonical`, { field });
  if (value === 0n) throw new QuorumFenceError('POINT_IDENTITY', `"${field}" is the identity`, { field });
  return value;
}

/** A fresh stand-in backend (one per run, so each run has its own batcher of checks). */
export function createSimBackend(): BlsBackend {
  const decodeSignature = (bytes: Uint8Array, field = 'signature') =>
    signatureOf(decodeScalar(bytes, SIGNATURE_TAG, 96, field));
  const linearCombination = (terms: readonly CombineTerm[]) => {
    let sum = 0n;
    for (const term of terms) sum += term.coefficient * own(term.signature, SimSignature, 'signature').value;
    const value = mod(sum);
    return value === 0n ? null : signatureOf(value);
  };
  const backend: BlsBackend = {
    name: 'sim',
    decodePublicKey: (bytes, field = 'publicKey') => keyOf(decodeScalar(bytes, PUBLIC_KEY_TAG, 48, field)),
    decodeSignature,
    secretKeyFromBytes: (bytes) => {
      if (!(bytes instanceof Uint8Array) || bytes.length !== 32)
        throw new QuorumFenceError('BAD_LENGTH', '"secretKey" expected 32 bytes');
      const scalar = bytesToBigInt(bytes);
      if (scalar === 0n || scalar >= SCALAR_ORDER)
        throw new QuorumFenceError('BAD_KEY_FILE', '"secretKey" must be in 1 .. r-1');
      return keyOf(scalar);
    },
    publicKeyOf: (secretKey) => keyOf(own(secretKey, SimKey, 'secret key').scalar),
    sign: (secretKey, message) => signatureOf(mod(own(secretKey, SimKey, 'secret key').scalar * hashToScalar(message))),
    verify: (publicKey, message, signature) =>
      own(signature, SimSignature, 'signature').value ===
      mod(own(publicKey, SimKey, 'public key').scalar * hashToScalar(message)),
    verifyAll: (sets: readonly VerificationSet[]) =>
      sets.length > 0 && sets.every((set) => backend.verify(set.publicKey, set.message, set.signature)),
    decodeSignaturePoint: (bytes, field) => new SimSignaturePoint(decodeSignature(bytes, field)),
    checkSignature: (point) => own(point, SimSignaturePoint, 'signature point').signature,
    linearCombination,
    combinePoints: (terms: readonly PointTerm[]) => {
      const sum = linearCombination(
        terms.map(({ point, coefficient }) => ({
          signature: own(point, SimSignaturePoint, 'signature point').signature,
          coefficient,
        })),
      );
      return sum && new SimSignaturePoint(sum);
    },
  };
  return backend;
}

/** A dealt cluster for a run: the public description and each replica's scaled share. */
export interface SimKeys {
  readonly cluster: Cluster;
  /** secretKeys[i - 1] is replica i's scaled share. */
  readonly secretKeys: readonly SecretKey[];
  /** The group secret, kept by the simulator alone (a reshare deals new shares of it). */
  readonly groupSecret: bigint | undefined;
}

/**
 * Deals a cluster of `n` for a run. `sim`: Shamir shares of a secret drawn from `seed` over the stand-in group
 * (generation `membershipVersion`; pass `groupSecret` to deal new shares of the same key, as a reshare does).
 * `real`: the real dealer with the native backend (the same seed gives the same key).
 * @param schedule how the run defers the batched pairing checks of this backend (never a real timer).
 */
export function dealRunKeys(
  mode: CryptoMode,
  n: number,
  seed: number,
  schedule: (run: () => void) => void,
  reshare?: { readonly groupSecret: bigint; readonly membershipVersion: number; readonly backend: BlsBackend },
): SimKeys {
  const f = (n - 1) / 3;
  const t = 2 * f + 1;
  const random = seededRandom(u64be(BigInt(seed >>> 0)));
  if (mode === 'real') {
    const backend = wrapBackend(loadBackend('blst'));
    installVerifyBatcher(backend, new VerifyBatcher(backend, undefined, schedule));
    const key = dealKey(n, t, random);
    const cluster = parseCluster(describeDealtKey(key, simEndpoints(n)), { backend });
    const secretKeys = key.shares.map((share) => backend.secretKeyFromBytes(share.scaledSecretShare));
    return { cluster, secretKeys, groupSecret: undefined };
  }
  const backend = reshare?.backend ?? createSimBackend();
  if (!reshare) installVerifyBatcher(backend, new VerifyBatcher(backend, undefined, schedule));
  const scalar = () => {
    for (;;) {
      const value = mod(bytesToBigInt(random(64)));
      if (value !== 0n) return value;
    }
  };
  const coefficients = [reshare?.groupSecret ?? scalar()];
  for (let k = 1; k < t; k++) coefficients.push(scalar());
  const deltaInverse = invert(delta(n));
  const secretKeys: SimKey[] = [];
  for (let i = 1; i <= n; i++) {
    let value = 0n;
    for (let k = t - 1; k >= 0; k--) value = mod(value * BigInt(i) + coefficients[k]!);
    secretKeys.push(keyOf(mod(value * deltaInverse)));
  }
  const groupPublicKey = keyOf(coefficients[0]!);
  const id = clusterIdOfKey(groupPublicKey.bytes);
  const cluster: Cluster = {
    n,
    f,
    t,
    id,
    idHex: toHex(id),
    groupPublicKey,
    commitments: [groupPublicKey.bytes],
    replicas: secretKeys.map((key, k) => ({
      index: k + 1,
      publicKeyShare: keyOf(key.scalar),
      endpoint: simEndpoints(n)[k]!,
    })),
    format: CLUSTER_FORMAT,
    backend,
    membershipVersion: reshare?.membershipVersion ?? 0,
    endorsement: undefined,
  };
  return { cluster, secretKeys, groupSecret: coefficients[0]! };
}

/** Names, not addresses: nothing in a simulated run opens a socket. */
function simEndpoints(n: number): string[] {
  return Array.from({ length: n }, (_, k) => `ws://simulated-replica-${k + 1}.invalid`);
}

/**
 * The native backend behind an object of the run's own, so the run's batcher of checks (deferred on virtual time)
 * is keyed to it and the process's shared batcher is left alone.
 */
function wrapBackend(inner: BlsBackend): BlsBackend {
  return {
    name: inner.name,
    decodePublicKey: (bytes, field) => inner.decodePublicKey(bytes, field),
    decodeSignature: (bytes, field) => inner.decodeSignature(bytes, field),
    decodeSignaturePoint: (bytes, field) => inner.decodeSignaturePoint(bytes, field),
    checkSignature: (point, field) => inner.checkSignature(point, field),
    secretKeyFromBytes: (bytes) => inner.secretKeyFromBytes(bytes),
    publicKeyOf: (secretKey) => inner.publicKeyOf(secretKey),
    sign: (secretKey, message) => inner.sign(secretKey, message),
    verify: (publicKey, message, signature) => inner.verify(publicKey, message, signature),
    verifyAll: (sets) => inner.verifyAll(sets),
    linearCombination: (terms) => inner.linearCombination(terms),
    combinePoints: (terms) => inner.combinePoints(terms),
  };
}
