/**
 * Conformance vectors for token verifiers in any language: a cluster (from a fixed seed, so the file is
 * reproducible), valid tokens, and tokens broken in every way the decoder and the verifier tell apart, each
 * with the verdict and error code it must get. `quorumfence-dev vectors` writes them to test/vectors/; every
 * verifier in this repository (both BLS backends, the universal verifier, the guard's verifier, the browser
 * bundle) is tested against the file.
 *
 * Each case's expected outcome is what the case was built to show, and the generator checks this
 * repository's verifier against it before writing: a case that does not get its intended code is an error,
 * never a vector.
 */
import { QuorumFenceError } from '../common/errors.js';
import { concatBytes, toBase64Url, toHex } from '../common/bytes.js';
import { clusterToJson, describeDealtKey, localEndpoints, parseCluster, type Cluster } from '../cluster/description.js';
import type { BlsBackend } from '../crypto/backend.js';
import { seededRandom } from '../crypto/random.js';
import { combinePartials, dealKey } from '../crypto/threshold.js';
import { checkToken, encodeToken, type AdmissionToken, type TokenCheck } from '../token/admission-token.js';
import { grantMessage, type Grant } from '../token/grant.js';

export const CONFORMANCE_FORMAT = 'quorumfence/token-vectors/v1';

/** The verdict a verifier must reach: `ok`, or the reason and (for `malformed`) the decoder's error code. */
export type Expected =
  | { readonly ok: true }
  | { readonly ok: false; readonly reason: 'wrong_cluster' | 'bad_signature' }
  | { readonly ok: false; readonly reason: 'malformed'; readonly code: string };

export interface ConformanceCase {
  readonly name: string;
  /** The token as base64url text (how tokens travel); `tokenHex` is the same bytes, when it decodes. */
  readonly token: string;
  readonly tokenHex: string;
  readonly expected: Expected;
}

export interface ConformanceVectors {
  readonly format: typeof CONFORMANCE_FORMAT;
  readonly description: string;
  /** The seed (hex) of the dealt cluster; regenerating from it gives this file byte for byte. */
  readonly seed: string;
  /** The public description to pin: verify against its clusterId and groupPublicKey. */
  readonly cluster: ReturnType<typeof clusterToJson>;
  readonly cases: readonly ConformanceCase[];
}

/** Offsets in the binary token (docs/protocol.md, "Token"). */
const AT_CLUSTER_ID = 1;
const AT_EPOCH = 33;
const AT_RESOURCE_LENGTH = 41;
const AT_RESOURCE = 43;

function dealt(seed: Uint8Array, backend: BlsBackend) {
  const key = dealKey(4, 3, seededRandom(seed));
  const cluster = parseCluster(describeDealtKey(key, localEndpoints(4)), { backend });
  const secretKeys = key.shares.map((s) => backend.secretKeyFromBytes(s.scaledSecretShare));
  const sign = (grant: Grant): AdmissionToken => {
    const partials = [1, 2, 3].map((index) => ({
      index,
      signature: backend.sign(secretKeys[index - 1]!, grantMessage(grant)),
    }));
    const signature = combinePartials(backend, 4, partials);
    if (!signature) throw new QuorumFenceError('INTERNAL', 'combined signature is the identity');
    return encodeToken(grant, signature);
  };
  return { cluster, sign };
}

function outcomeOf(check: TokenCheck): Expected {
  if (check.ok) return { ok: true };
  return check.reason === 'malformed'
    ? { ok: false, reason: 'malformed', code: check.code }
    : { ok: false, reason: check.reason };
}

/** Generates the vectors for `seed` (32 bytes) and checks each against this repository's verifier. */
export function makeConformanceVectors(seed: Uint8Array, backend: BlsBackend): ConformanceVectors {
  const { cluster, sign } = dealt(seed, backend);
  const other = dealt(concatBytes(seed.subarray(0, 31), Uint8Array.of(seed[31]! ^ 0xff)), backend);
  const holder = new Uint8Array(32).map((_, i) => (i * 7 + 3) & 0xff);
  const grant = (resource: string, epoch: bigint, clusterOf: Cluster = cluster): Grant => ({
    clusterId: clusterOf.id,
    resource,
    epoch,
    holder,
  });
  const valid = sign(grant('orders/eu-17', 42n)).bytes;
  const flip = (at: number, mask = 0x01) => valid.map((b, i) => (i === at ? b ^ mask : b));
  const signatureAt = valid.length - 96;
  const withSignature = (signature: Uint8Array) => concatBytes(valid.subarray(0, signatureAt), signature);
  const identity = new Uint8Array(96);
  identity[0] = 0xc0;
  // x = 2 (in Fp2: c1 = 0, c0 = 2) is on the twist but the point is outside the prime-order subgroup.
  const outsideSubgroup = new Uint8Array(96);
  outsideSubgroup[0] = 0x80;
  outsideSubgroup[95] = 0x02;
  // A coordinate not below the field modulus: all ones under the compression flag.
  const overModulus = new Uint8Array(96).fill(0xff);
  overModulus[0] = 0x9f;

  const binary: [string, Uint8Array, Expected][] = [
    ['valid', valid, { ok: true }],
    ['valid, epoch 1, one-byte resource', sign(grant('a', 1n)).bytes, { ok: true }],
    ['valid, epoch 2^63-1', sign(grant('max', (1n << 63n) - 1n)).bytes, { ok: true }],
    ['valid, multi-byte UTF-8 resource', sign(grant('commandes/été/№7', 7n)).bytes, { ok: true }],
    ['valid, 256-byte resource', sign(grant('r'.repeat(256), 9n)).bytes, { ok: true }],
    ['version byte changed', flip(0, 0x03), { ok: false, reason: 'malformed', code: 'UNKNOWN_VERSION' }],
    ['cluster id byte changed', flip(AT_CLUSTER_ID + 5), { ok: false, reason: 'wrong_cluster' }],
    ['epoch byte changed', flip(AT_EPOCH + 7), { ok: false, reason: 'bad_signature' }],
    [
      'epoch 0',
      sign(grant('orders/eu-17', 42n)).bytes.map((b, i) => (i >= AT_EPOCH && i < AT_EPOCH + 8 ? 0 : b)),
      { ok: false, reason: 'malformed', code: 'EPOCH_OUT_OF_RANGE' },
    ],
    ['epoch above 2^63-1', flip(AT_EPOCH, 0x80), { ok: false, reason: 'malformed', code: 'EPOCH_OUT_OF_RANGE' }],
    [
      'resource length one more',
      valid.map((b, i) => (i === AT_RESOURCE_LENGTH + 1 ? b + 1 : b)),
      { ok: false, reason: 'malformed', code: 'BAD_LENGTH' },
    ],
    [
      'resource length 0',
      valid.map((b, i) => (i === AT_RESOURCE_LENGTH || i === AT_RESOURCE_LENGTH + 1 ? 0 : b)),
      { ok: false, reason: 'malformed', code: 'RESOURCE_EMPTY' },
    ],
    ['resource byte changed', flip(AT_RESOURCE + 2, 0x20), { ok: false, reason: 'bad_signature' }],
    [
      'resource not UTF-8',
      valid.map((b, i) => (i === AT_RESOURCE ? 0xff : b)),
      { ok: false, reason: 'malformed', code: 'RESOURCE_NOT_UTF8' },
    ],
    [
      'resource with a control character',
      valid.map((b, i) => (i === AT_RESOURCE ? 0x00 : b)),
      { ok: false, reason: 'malformed', code: 'NAME_CONTROL_CHARACTER' },
    ],
    ['holder byte changed', flip(signatureAt - 1), { ok: false, reason: 'bad_signature' }],
    [
      'signature: another valid point',
      withSignature(sign(grant('orders/eu-17', 43n)).signature.bytes),
      { ok: false, reason: 'bad_signature' },
    ],
    [
      'signature: the identity point',
      withSignature(identity),
      { ok: false, reason: 'malformed', code: 'POINT_IDENTITY' },
    ],
    [
      'signature: outside the subgroup',
      withSignature(outsideSubgroup),
      { ok: false, reason: 'malformed', code: 'POINT_NOT_IN_SUBGROUP' },
    ],
    [
      'signature: coordinate over the modulus',
      withSignature(overModulus),
      { ok: false, reason: 'malformed', code: 'POINT_NOT_CANONICAL' },
    ],
    [
      'signature: compression flag cleared',
      flip(signatureAt, 0x80),
      { ok: false, reason: 'malformed', code: 'POINT_NOT_CANONICAL' },
    ],
    [
      'truncated by one byte',
      valid.subarray(0, valid.length - 1),
      { ok: false, reason: 'malformed', code: 'BAD_LENGTH' },
    ],
    [
      'extended by one byte',
      concatBytes(valid, Uint8Array.of(0)),
      { ok: false, reason: 'malformed', code: 'TRAILING_BYTES' },
    ],
    ['empty', new Uint8Array(0), { ok: false, reason: 'malformed', code: 'BAD_LENGTH' }],
    [
      'another cluster',
      other.sign(grant('orders/eu-17', 42n, other.cluster)).bytes,
      { ok: false, reason: 'wrong_cluster' },
    ],
    [
      "this cluster's id, another group's signature",
      other.sign(grant('orders/eu-17', 42n)).bytes,
      { ok: false, reason: 'bad_signature' },
    ],
  ];
  const cases: ConformanceCase[] = binary.map(([name, bytes, expected]) => ({
    name,
    token: toBase64Url(bytes),
    tokenHex: toHex(bytes),
    expected,
  }));
  const validText = toBase64Url(valid);
  cases.push({
    // Two more characters make one more byte with four bits left over; a canonical text leaves them zero.
    name: 'text: non-canonical base64url (bits left over)',
    token: validText + 'AB',
    tokenHex: '',
    expected: { ok: false, reason: 'malformed', code: 'BAD_ENCODING' },
  });
  cases.push({
    name: 'text: padding',
    token: validText + '=',
    tokenHex: '',
    expected: { ok: false, reason: 'malformed', code: 'BAD_ENCODING' },
  });

  for (const c of cases) {
    const got = outcomeOf(checkToken(c.token, cluster));
    if (JSON.stringify(got) !== JSON.stringify(c.expected))
      throw new QuorumFenceError(
        'INTERNAL',
        `vector "${c.name}": expected ${JSON.stringify(c.expected)}, the verifier says ${JSON.stringify(got)}`,
      );
  }
  return {
    format: CONFORMANCE_FORMAT,
    description:
      'Admission tokens for one cluster: decode each `token` (base64url, no padding), verify it against `cluster.clusterId` and `cluster.groupPublicKey` (docs/protocol.md, "Token"), and expect `expected`: ok, or the reason, and for malformed tokens the error code.',
    seed: toHex(seed),
    cluster: clusterToJson(cluster),
    cases,
  };
}

/** The verdict a TokenCheck gives, in the vectors' form (for tests comparing verifiers). */
export const conformanceOutcome = outcomeOf;
