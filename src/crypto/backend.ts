/**
 * The one interface every BLS implementation offers the project. Points are
 * opaque handles that carry their canonical compressed bytes, so nothing
 * re-serialises a point it already has, and a handle from one backend is
 * refused by the other.
 */

/** Ciphersuite tag of the proof-of-possession BLS variant with G2 signatures (the most widely implemented one). */
export const SIGNATURE_DST = 'BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_';

export const PUBLIC_KEY_BYTES = 48;
export const SIGNATURE_BYTES = 96;
export const SECRET_KEY_BYTES = 32;

/** `sim`: the simulator's stand-in (src/simulation/crypto.ts), never loaded by loadBackend and never in a process that serves. */
export type BackendName = 'noble' | 'blst' | 'sim';

/** A G1 point that passed every check (canonical, on curve, in subgroup, not identity). */
export interface PublicKey {
  readonly backend: BackendName;
  /** Compressed, 48 bytes. */
  readonly bytes: Uint8Array;
}

/** A G2 point that passed every check (canonical, on curve, in subgroup, not identity). */
export interface Signature {
  readonly backend: BackendName;
  /** Compressed, 96 bytes. */
  readonly bytes: Uint8Array;
  readonly inSubgroup: true;
}

/**
 * A G2 point that is canonical, on the curve and not the identity, but not (yet) known to be in the prime-order
 * subgroup: a partial signature as a client holds it. Only `combinePoints` and `checkSignature` take one, so it is
 * never verified or passed on as a signature; a client combines t of them and checks the one result, one subgroup
 * check per grant instead of t (src/client/partial-collector.ts).
 */
export interface SignaturePoint {
  readonly backend: BackendName;
  /** Compressed, 96 bytes. */
  readonly bytes: Uint8Array;
  readonly inSubgroup: false;
}

/** A scalar 0 < s < r. Never serialised by the backend; key files hold it as hex. */
export interface SecretKey {
  readonly backend: BackendName;
}

export interface VerificationSet {
  readonly publicKey: PublicKey;
  readonly message: Uint8Array;
  readonly signature: Signature;
}

export interface CombineTerm {
  readonly signature: Signature;
  /** A signed integer coefficient (Δ·λ, see threshold.ts), not reduced modulo r. */
  readonly coefficient: bigint;
}

export interface PointTerm {
  readonly point: SignaturePoint;
  /** As in CombineTerm. */
  readonly coefficient: bigint;
}

export interface BlsBackend {
  readonly name: BackendName;
  /**
   * Decodes a compressed G1 point with every check.
   * @throws QuorumFenceError BAD_LENGTH, POINT_NOT_CANONICAL, POINT_IDENTITY, POINT_NOT_ON_CURVE, POINT_NOT_IN_SUBGROUP
   */
  decodePublicKey(bytes: Uint8Array, field?: string): PublicKey;
  /**
   * Decodes a compressed G2 point with every check.
   * @throws QuorumFenceError BAD_LENGTH, POINT_NOT_CANONICAL, POINT_IDENTITY, POINT_NOT_ON_CURVE, POINT_NOT_IN_SUBGROUP
   */
  decodeSignature(bytes: Uint8Array, field?: string): Signature;
  /**
   * Decodes a compressed G2 point with every check but the subgroup one (which a backend may still make).
   * @throws QuorumFenceError BAD_LENGTH, POINT_NOT_CANONICAL, POINT_IDENTITY, POINT_NOT_ON_CURVE
   */
  decodeSignaturePoint(bytes: Uint8Array, field?: string): SignaturePoint;
  /**
   * The subgroup check that makes a point a Signature.
   * @throws QuorumFenceError POINT_NOT_IN_SUBGROUP
   */
  checkSignature(point: SignaturePoint, field?: string): Signature;
  /**
   * A 32-byte big-endian scalar in 1 .. r-1.
   * @throws QuorumFenceError BAD_LENGTH, BAD_KEY_FILE (zero or not below r)
   */
  secretKeyFromBytes(bytes: Uint8Array): SecretKey;
  publicKeyOf(secretKey: SecretKey): PublicKey;
  /** Hashes `message` to G2 with SIGNATURE_DST and multiplies by the key. Deterministic. */
  sign(secretKey: SecretKey, message: Uint8Array): Signature;
  /** One pairing check; false for any mismatch. */
  verify(publicKey: PublicKey, message: Uint8Array, signature: Signature): boolean;
  /**
   * True only if every set verifies. The native backend checks them together
   * (each set weighted by a fresh random 64-bit scalar, so invalid signatures
   * cannot cancel out; one Miller loop per set and one final exponentiation);
   * false says at least one fails, not which. An empty list is false.
   */
  verifyAll(sets: readonly VerificationSet[]): boolean;
  /**
   * Σ coefficientᵢ · signatureᵢ with small signed integer coefficients.
   * Returns null when the sum is the identity (only adversarial partials get there).
   */
  linearCombination(terms: readonly CombineTerm[]): Signature | null;
  /** The same sum over points not known to be in the subgroup; so is the result (check it with checkSignature). */
  combinePoints(terms: readonly PointTerm[]): SignaturePoint | null;
}
