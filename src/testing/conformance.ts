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

/**
 * The checks a verifier makes, in the order it makes them (docs/protocol.md, "Token": "Which verdict wins when a
 * token has several faults"): for a token with several faults, the first failing check gives the verdict.
 */
export const PRECEDENCE = [
  {
    fault: 'oversized',
    expected: { ok: false, reason: 'malformed', code: 'BAD_LENGTH' },
    check: 'at most the longest token there can be: 427 bytes, 570 characters of text',
  },
  {
    fault: 'encoding',
    expected: { ok: false, reason: 'malformed', code: 'BAD_ENCODING' },
    check: 'text form: canonical base64url without padding',
  },
  { fault: 'empty', expected: { ok: false, reason: 'malformed', code: 'BAD_LENGTH' }, check: 'at least one byte' },
  {
    fault: 'version',
    expected: { ok: false, reason: 'malformed', code: 'UNKNOWN_VERSION' },
    check: 'version byte 0x01',
  },
  {
    fault: 'header-length',
    expected: { ok: false, reason: 'malformed', code: 'BAD_LENGTH' },
    check: 'the 43 bytes of version, cluster id, epoch and resource length',
  },
  {
    fault: 'epoch',
    expected: { ok: false, reason: 'malformed', code: 'EPOCH_OUT_OF_RANGE' },
    check: 'epoch in 1 .. 2^63-1',
  },
  {
    fault: 'resource-empty',
    expected: { ok: false, reason: 'malformed', code: 'RESOURCE_EMPTY' },
    check: 'resource length not 0',
  },
  {
    fault: 'resource-too-long',
    expected: { ok: false, reason: 'malformed', code: 'RESOURCE_TOO_LONG' },
    check: 'resource length at most 256',
  },
  {
    fault: 'too-short',
    expected: { ok: false, reason: 'malformed', code: 'BAD_LENGTH' },
    check: 'at least 1 + 32 + 8 + 2 + length + 32 + 96 bytes',
  },
  {
    fault: 'trailing',
    expected: { ok: false, reason: 'malformed', code: 'TRAILING_BYTES' },
    check: 'no more than 1 + 32 + 8 + 2 + length + 32 + 96 bytes',
  },
  {
    fault: 'resource-utf8',
    expected: { ok: false, reason: 'malformed', code: 'RESOURCE_NOT_UTF8' },
    check: 'resource well-formed UTF-8',
  },
  {
    fault: 'resource-control',
    expected: { ok: false, reason: 'malformed', code: 'NAME_CONTROL_CHARACTER' },
    check: 'no control character (U+0000..U+001F, U+007F) in the resource',
  },
  {
    fault: 'signature-flags',
    expected: { ok: false, reason: 'malformed', code: 'POINT_NOT_CANONICAL' },
    check: 'signature flags: compression set; infinity only as 0xc0 then zeros',
  },
  {
    fault: 'signature-identity',
    expected: { ok: false, reason: 'malformed', code: 'POINT_IDENTITY' },
    check: 'signature not the point at infinity',
  },
  {
    fault: 'signature-coordinate',
    expected: { ok: false, reason: 'malformed', code: 'POINT_NOT_CANONICAL' },
    check: 'signature coordinates below the field modulus',
  },
  {
    fault: 'signature-curve',
    expected: { ok: false, reason: 'malformed', code: 'POINT_NOT_ON_CURVE' },
    check: 'signature x on the curve',
  },
  {
    fault: 'signature-subgroup',
    expected: { ok: false, reason: 'malformed', code: 'POINT_NOT_IN_SUBGROUP' },
    check: 'signature in the prime-order subgroup',
  },
  { fault: 'cluster', expected: { ok: false, reason: 'wrong_cluster' }, check: 'cluster id the pinned one' },
  { fault: 'signature', expected: { ok: false, reason: 'bad_signature' }, check: 'the pairing check' },
] as const satisfies readonly { fault: string; expected: Expected; check: string }[];

export type Fault = (typeof PRECEDENCE)[number]['fault'];

/** The verdict for a token with these faults: the first of them in PRECEDENCE, `ok` for none. Pure. */
export function verdictOf(faults: readonly string[]): Expected {
  const first = PRECEDENCE.find((step) => faults.includes(step.fault));
  return first === undefined ? { ok: true } : first.expected;
}

export interface ConformanceCase {
  readonly name: string;
  /** The token as base64url text (how tokens travel); `tokenHex` is the same bytes, when it decodes. */
  readonly token: string;
  readonly tokenHex: string;
  /** What is wrong with it, each a `fault` of the precedence list; empty for a valid token. */
  readonly faults: readonly string[];
  readonly expected: Expected;
}

export interface ConformanceVectors {
  readonly format: typeof CONFORMANCE_FORMAT;
  readonly description: string;
  /** The seed (hex) of the dealt cluster; regenerating from it gives this file byte for byte. */
  readonly seed: string;
  /** The public description to pin: verify against its clusterId and groupPublicKey. */
  readonly cluster: ReturnType<typeof clusterToJson>;
  /** The checks in the order a verifier makes them: a token's verdict is its first fault's. */
  readonly precedence: readonly { readonly fault: string; readonly expected: Expected; readonly check: string }[];
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
  // The infinity flag with a non-zero payload: only 0xc0 followed by zeros is the identity.
  const infinityWithPayload = identity.slice();
  infinityWithPayload[95] = 0x01;
  const notOnCurve = firstOffCurve(backend);
  const longest = sign(grant('r'.repeat(256), 9n)).bytes;
  const otherClusterId = other.cluster.id;
  /** `bytes` with the cluster id of the other cluster (nothing else changed). */
  const withOtherId = (bytes: Uint8Array) =>
    bytes.map((b, i) => (i >= AT_CLUSTER_ID && i < AT_EPOCH ? otherClusterId[i - AT_CLUSTER_ID]! : b));
  const at = (bytes: Uint8Array, index: number, value: number) => bytes.map((b, i) => (i === index ? value : b));
  /** A token whose resource length field says `length` and which holds `resourceBytes` resource bytes. */
  const withResourceLength = (length: number, resourceBytes: number) =>
    concatBytes(
      valid.subarray(0, AT_RESOURCE_LENGTH),
      Uint8Array.of(length >> 8, length & 0xff),
      new Uint8Array(resourceBytes).fill(0x72),
      valid.subarray(signatureAt - 32),
    );

  const binary: [string, Uint8Array, Fault[]][] = [
    ['valid', valid, []],
    ['valid, epoch 1, one-byte resource', sign(grant('a', 1n)).bytes, []],
    ['valid, epoch 2^63-1', sign(grant('max', (1n << 63n) - 1n)).bytes, []],
    ['valid, multi-byte UTF-8 resource', sign(grant('commandes/été/№7', 7n)).bytes, []],
    ['valid, 256-byte resource', sign(grant('r'.repeat(256), 9n)).bytes, []],
    ['version byte changed', flip(0, 0x03), ['version']],
    ['cluster id byte changed', flip(AT_CLUSTER_ID + 5), ['cluster']],
    ['epoch byte changed', flip(AT_EPOCH + 7), ['signature']],
    [
      'epoch 0',
      sign(grant('orders/eu-17', 42n)).bytes.map((b, i) => (i >= AT_EPOCH && i < AT_EPOCH + 8 ? 0 : b)),
      ['epoch', 'signature'],
    ],
    ['epoch above 2^63-1', flip(AT_EPOCH, 0x80), ['epoch', 'signature']],
    ['resource length one more', valid.map((b, i) => (i === AT_RESOURCE_LENGTH + 1 ? b + 1 : b)), ['too-short']],
    [
      'resource length 0',
      valid.map((b, i) => (i === AT_RESOURCE_LENGTH || i === AT_RESOURCE_LENGTH + 1 ? 0 : b)),
      ['resource-empty', 'trailing'],
    ],
    ['resource length 257', withResourceLength(257, 257), ['oversized', 'resource-too-long']],
    ['resource byte changed', flip(AT_RESOURCE + 2, 0x20), ['signature']],
    ['resource not UTF-8', at(valid, AT_RESOURCE, 0xff), ['resource-utf8', 'signature']],
    ['resource with a control character', at(valid, AT_RESOURCE, 0x00), ['resource-control', 'signature']],
    ['holder byte changed', flip(signatureAt - 1), ['signature']],
    ['signature: another valid point', withSignature(sign(grant('orders/eu-17', 43n)).signature.bytes), ['signature']],
    ['signature: the identity point', withSignature(identity), ['signature-identity']],
    ['signature: outside the subgroup', withSignature(outsideSubgroup), ['signature-subgroup']],
    ['signature: x not on the curve', withSignature(notOnCurve), ['signature-curve']],
    ['signature: coordinate over the modulus', withSignature(overModulus), ['signature-coordinate']],
    ['signature: compression flag cleared', flip(signatureAt, 0x80), ['signature-flags']],
    ['signature: infinity flag with a non-zero payload', withSignature(infinityWithPayload), ['signature-flags']],
    ['truncated by one byte', valid.subarray(0, valid.length - 1), ['too-short']],
    ['extended by one byte', concatBytes(valid, Uint8Array.of(0)), ['trailing']],
    ['the longest token extended by one byte', concatBytes(longest, Uint8Array.of(0)), ['oversized', 'trailing']],
    ['cut inside the header', valid.subarray(0, 20), ['header-length']],
    ['empty', new Uint8Array(0), ['empty']],
    ['another cluster', other.sign(grant('orders/eu-17', 42n, other.cluster)).bytes, ['cluster', 'signature']],
    ["this cluster's id, another group's signature", other.sign(grant('orders/eu-17', 42n)).bytes, ['signature']],
    // Several faults at once: the verdict is the first in the precedence order, the same at every verifier.
    [
      'several: version changed, cut inside the header',
      at(valid.subarray(0, 20), 0, 0x02),
      ['version', 'header-length'],
    ],
    [
      'several: epoch 0, resource length 0, extended',
      concatBytes(
        valid.map((b, i) =>
          (i >= AT_EPOCH && i < AT_EPOCH + 8) || i === AT_RESOURCE_LENGTH || i === AT_RESOURCE_LENGTH + 1 ? 0 : b,
        ),
        Uint8Array.of(0),
      ),
      ['epoch', 'resource-empty', 'trailing', 'signature'],
    ],
    [
      'several: epoch above 2^63-1, compression flag cleared',
      flip(AT_EPOCH, 0x80).map((b, i) => (i === signatureAt ? b ^ 0x80 : b)),
      ['epoch', 'signature-flags'],
    ],
    ['several: resource length 257, too few bytes', withResourceLength(257, 12), ['resource-too-long', 'too-short']],
    [
      'several: truncated by one byte, resource not UTF-8',
      at(valid, AT_RESOURCE, 0xff).subarray(0, valid.length - 1),
      ['too-short', 'resource-utf8'],
    ],
    [
      'several: extended by one byte, a control character',
      concatBytes(at(valid, AT_RESOURCE, 0x00), Uint8Array.of(0)),
      ['trailing', 'resource-control', 'signature'],
    ],
    [
      'several: resource not UTF-8 and a control character',
      at(at(valid, AT_RESOURCE, 0xff), AT_RESOURCE + 1, 0x00),
      ['resource-utf8', 'resource-control', 'signature'],
    ],
    [
      'several: a control character, signature the identity',
      at(withSignature(identity), AT_RESOURCE, 0x00),
      ['resource-control', 'signature-identity'],
    ],
    [
      'several: another cluster id, signature the identity',
      withOtherId(withSignature(identity)),
      ['signature-identity', 'cluster'],
    ],
    [
      'several: another cluster id, signature outside the subgroup',
      withOtherId(withSignature(outsideSubgroup)),
      ['signature-subgroup', 'cluster'],
    ],
    [
      'several: another cluster id, signature x not on the curve',
      withOtherId(withSignature(notOnCurve)),
      ['signature-curve', 'cluster'],
    ],
    ['several: another cluster id, epoch changed', withOtherId(flip(AT_EPOCH + 7)), ['cluster', 'signature']],
  ];
  const cases: ConformanceCase[] = binary.map(([name, bytes, faults]) => ({
    name,
    token: toBase64Url(bytes),
    tokenHex: toHex(bytes),
    faults,
    expected: verdictOf(faults),
  }));
  const validText = toBase64Url(valid);
  const textCases: [string, string, Fault[]][] = [
    // Two more characters make one more byte with four bits left over; a canonical text leaves them zero.
    ['text: non-canonical base64url (bits left over)', validText + 'AB', ['encoding']],
    ['text: padding', validText + '=', ['encoding']],
    ['several: text with padding, version changed', toBase64Url(flip(0, 0x03)) + '=', ['encoding', 'version']],
    // 571 characters: longer than the longest token's text, and one character left over besides.
    [
      'several: text one character longer than the longest token',
      toBase64Url(longest) + 'A',
      ['oversized', 'encoding'],
    ],
  ];
  for (const [name, token, faults] of textCases)
    cases.push({ name, token, tokenHex: '', faults, expected: verdictOf(faults) });

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
      'Admission tokens for one cluster: decode each `token` (base64url, no padding), verify it against `cluster.clusterId` and `cluster.groupPublicKey` (docs/protocol.md, "Token"), and expect `expected`: ok, or the reason, and for malformed tokens the error code. `faults` lists what is wrong with a token; with several, the verdict is that of the first in `precedence`, the order in which a verifier makes its checks.',
    seed: toHex(seed),
    cluster: clusterToJson(cluster),
    precedence: PRECEDENCE,
    cases,
  };
}

/**
 * A compressed G2 encoding whose x (x₁ = 0, x₀ = k, the smallest such k) is the x of no point on the curve: the
 * decoder's POINT_NOT_ON_CURVE. Found by asking the backend; both give the same answer.
 */
function firstOffCurve(backend: BlsBackend): Uint8Array {
  for (let k = 1; k < 256; k++) {
    const bytes = new Uint8Array(96);
    bytes[0] = 0x80;
    bytes[95] = k;
    try {
      backend.decodeSignature(bytes, 'probe');
    } catch (error) {
      if (error instanceof QuorumFenceError && error.code === 'POINT_NOT_ON_CURVE') return bytes;
    }
  }
  throw new QuorumFenceError('INTERNAL', 'no x below 256 off the curve');
}

/** The verdict a TokenCheck gives, in the vectors' form (for tests comparing verifiers). */
export const conformanceOutcome = outcomeOf;
