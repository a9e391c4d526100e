/**
 * The guard's decision logic, shared by every store adapter. Two steps:
 *
 *   admit(request)          outside the transaction: decode and verify the
 *                           token (cached; a miss's pairing batched with
 *                           other writes'), check the resource, check the
 *                           proof-of-possession signature. Pure but for the
 *                           verification cache.
 *   decide(admitted, b)     inside the transaction, on the barrier read
 *                           there: the fence and the replay window. Pure.
 *
 * The adapter then applies the caller's mutation, stores the new barrier and
 * appends the log entry built here, all in one transaction. No function here
 * does I/O or reads a clock (S6).
 */
import { QuorumFenceError, type ErrorCode } from '../common/errors.js';
import { bytesEqual, toBase64Url, toHex } from '../common/bytes.js';
import { expectGuardKey, expectInteger, expectResource, expectString } from '../common/check.js';
import { silentLogger, type Logger } from '../common/log.js';
import type { Cluster } from '../cluster/description.js';
import type { AdmissionToken } from '../token/admission-token.js';
import { decideFence, type Barrier, type FenceDecision } from './fence.js';
import type { GuardLogEntry, GuardOutcomeLabel, GuardRefusalReason } from './log.js';
import { PROOF_SIGNATURE_BYTES, verifyRequestProof } from './proof.js';
import { DEFAULT_TOKEN_CACHE_SIZE, TokenVerifier, type VerifiedTokenInfo, type VerifierObserver } from './verifier.js';

/** Metrics hooks; the process implements them (see metrics.ts). */
export interface GuardObserver extends VerifierObserver {
  /** One call per attempt: logged, or refused at admission (never logged). */
  attempt(op: string, outcome: GuardOutcomeLabel): void;
  /** A conflicting token was refused: the alarm. */
  conflict(resource: string): void;
}

export interface GuardOptions {
  /** Verified tokens to remember. Default DEFAULT_TOKEN_CACHE_SIZE. */
  readonly tokenCacheSize?: number;
  /** Refuse requests without a proof of possession. Default false. */
  readonly requireProof?: boolean;
  /** This guard's name in proof transcripts, so a signed request cannot be replayed at another guard. Default ''. */
  readonly audience?: string;
  /** Longest key, in UTF-8 bytes, a request may name. Default DEFAULT_MAX_KEY_BYTES. */
  readonly maxKeyBytes?: number;
  readonly observer?: GuardObserver;
  /** Where the conflict alarm is logged. Default: silent. */
  readonly logger?: Logger;
  /** The fence (default fence.ts's `decideFence`); the simulator (src/simulation) plants its mutation here. */
  readonly fence?: typeof decideFence;
}

/** Keys live inside the store's own keys (with the resource); 512 bytes keeps them far below LMDB's 1978-byte key limit. */
export const DEFAULT_MAX_KEY_BYTES = 512;
const MAX_OP_LENGTH = 32;

/** The holder's signature over the request (see proof.ts). */
export interface PresentedProof {
  /** The request method as the transcript names it, e.g. PUT. */
  readonly method: string;
  /** SHA-256 of the body the guard actually received: the caller computes it, never the client. */
  readonly bodyDigest: Uint8Array;
  readonly counter: bigint;
  readonly signature: Uint8Array;
}

export interface GuardRequest {
  /** The admission token, text or binary form; undefined when the request had none. */
  readonly token: string | Uint8Array | undefined;
  /** The resource the request acts on. */
  readonly resource: string;
  /** A short label for the log and metrics (`put`, `delete`, ...). Default `write`. */
  readonly op?: string;
  /** The key within the resource, for the log and the proof transcript. */
  readonly key?: string;
  readonly proof?: PresentedProof;
}

export type Admission =
  | ({
      readonly ok: true;
      /** Set when the request carried a verified proof of possession. */
      readonly counter: bigint | undefined;
    } & VerifiedTokenInfo)
  | {
      readonly ok: false;
      readonly reason: GuardRefusalReason;
      readonly message: string;
      readonly errorCode: ErrorCode | null;
      /** Present when the token decoded, so the log can name it. */
      readonly token: AdmissionToken | undefined;
      readonly digestHex: string | null;
    };

/** An accepted attempt, durable when the adapter returns it. */
export interface GuardAccepted<T> {
  readonly ok: true;
  readonly seq: number;
  readonly epoch: bigint;
  /** The barrier after the write (equal to `epoch`). */
  readonly barrier: bigint;
  /** True when this write raised the barrier. */
  readonly raised: boolean;
  /** The data version this write stamped on what it changed (its seq), when the adapter keeps versions and it changed something. */
  readonly version: number | null;
  /** What the caller's mutation returned. */
  readonly result: T;
}

/** A refused attempt: only the log entry (seq) was written, or nothing at all (refused at admission). */
export interface GuardRefused {
  readonly ok: false;
  readonly reason: GuardRefusalReason;
  /**
   * The log entry's seq; null when the request was refused at admission (its token or its proof, decided without
   * reading the store), which no adapter writes: anyone can send those (docs/security.md, "The guard log").
   */
  readonly seq: number | null;
  readonly message: string;
  /** The barrier the decision saw (null when the resource had none, or the refusal came before it was read). */
  readonly barrier: bigint | null;
  /** For `malformed`: the decoder's error code. */
  readonly errorCode: ErrorCode | null;
}

export type GuardResult<T> = GuardAccepted<T> | GuardRefused;

/**
 * Checks a request's shape once, at the adapter's boundary.
 * @throws QuorumFenceError INVALID_ARGUMENT, RESOURCE_EMPTY, RESOURCE_TOO_LONG, RESOURCE_NOT_UTF8, NAME_CONTROL_CHARACTER
 */
export function checkGuardRequest(request: GuardRequest, maxKeyBytes: number): void {
  expectResource(request.resource, 'resource');
  if (request.op !== undefined) {
    expectString(request.op, 'op', MAX_OP_LENGTH);
    if (request.op.length === 0)
      throw new QuorumFenceError('INVALID_ARGUMENT', '"op" must not be empty', { field: 'op' });
  }
  if (request.key !== undefined) expectGuardKey(request.key, maxKeyBytes);
  const token = request.token;
  if (token !== undefined && typeof token !== 'string' && !(token instanceof Uint8Array)) {
    throw new QuorumFenceError('INVALID_ARGUMENT', '"token" expected a string or bytes', { field: 'token' });
  }
}

export class GuardCore {
  readonly cluster: Cluster;
  readonly verifier: TokenVerifier;
  readonly requireProof: boolean;
  readonly audience: string;
  readonly maxKeyBytes: number;
  readonly #observer: GuardObserver | undefined;
  readonly #logger: Logger;
  readonly #fence: typeof decideFence;

  /** @throws QuorumFenceError INVALID_ARGUMENT for a bad option. */
  constructor(cluster: Cluster, options: GuardOptions = {}) {
    this.cluster = cluster;
    this.verifier = new TokenVerifier(cluster, {
      cacheSize: options.tokenCacheSize ?? DEFAULT_TOKEN_CACHE_SIZE,
      ...(options.observer ? { observer: options.observer } : {}),
    });
    this.requireProof = options.requireProof ?? false;
    this.audience = expectString(options.audience ?? '', 'audience', 256);
    this.maxKeyBytes = expectInteger(options.maxKeyBytes ?? DEFAULT_MAX_KEY_BYTES, 1, 1024, 'maxKeyBytes');
    this.#observer = options.observer;
    this.#logger = options.logger ?? silentLogger;
    this.#fence = options.fence ?? decideFence;
  }

  /**
   * Everything that needs no store: the token (cached verification), the
   * resource, the proof signature. Cheapest checks first.
   */
  async admit(request: GuardRequest): Promise<Admission> {
    // Batched: concurrent writes that bring fresh tokens share their pairings (src/crypto/verify-batch.ts).
    const verified = await this.verifier.verifyBatched(request.token);
    if (!verified.ok) {
      return {
        ok: false,
        reason: verified.reason,
        message: verified.message,
        errorCode: verified.code,
        token: 'token' in verified ? verified.token : undefined,
        digestHex: 'digestHex' in verified ? verified.digestHex : null,
      };
    }
    const { token, digest, digestHex, text, holderHex } = verified;
    const info = { token, digest, digestHex, text, holderHex };
    const refuse = (reason: GuardRefusalReason, message: string): Admission => ({
      ok: false,
      reason,
      message,
      errorCode: null,
      token,
      digestHex,
    });
    if (token.grant.resource !== request.resource) {
      return refuse(
        'wrong_resource',
        `token is for resource ${JSON.stringify(token.grant.resource)}, not ${JSON.stringify(request.resource)}`,
      );
    }
    const proof = request.proof;
    if (proof === undefined) {
      if (this.requireProof)
        return refuse('proof_required', 'this guard requires a proof of possession signed by the holder key');
      return { ok: true, counter: undefined, ...info };
    }
    const fields = {
      audience: this.audience,
      method: proof.method,
      resource: request.resource,
      key: request.key ?? '',
      bodyDigest: proof.bodyDigest,
      tokenDigest: digest,
      counter: proof.counter,
    };
    if (
      proof.signature.length !== PROOF_SIGNATURE_BYTES ||
      !verifyRequestProof(token.grant.holder, fields, proof.signature)
    ) {
      return refuse('bad_proof', "the request's proof of possession does not verify under the token's holder key");
    }
    return { ok: true, counter: proof.counter, ...info };
  }

  /** The fence and the replay window, on the barrier read inside the transaction. */
  decide(admitted: Extract<Admission, { ok: true }>, barrier: Barrier | undefined): FenceDecision {
    return this.#fence(
      barrier,
      { epoch: admitted.token.grant.epoch, digest: admitted.digest, bytes: admitted.token.bytes },
      admitted.counter,
    );
  }

  /** The log entry for one attempt. */
  entry(fields: {
    seq: number;
    request: GuardRequest;
    admission: Admission;
    outcome: GuardOutcomeLabel;
    barrierBefore: bigint | undefined;
    barrierAfter: bigint | undefined;
    version: number | null;
    conflictingToken?: Uint8Array;
  }): GuardLogEntry {
    const { admission } = fields;
    const token = admission.token;
    const keepToken = fields.outcome === 'accepted' || fields.outcome === 'conflict';
    return {
      seq: fields.seq,
      op: fields.request.op ?? 'write',
      resource: fields.request.resource,
      key: fields.request.key ?? null,
      accepted: fields.outcome === 'accepted',
      outcome: fields.outcome,
      epoch: token ? token.grant.epoch.toString() : null,
      holder: admission.ok ? admission.holderHex : token ? toHex(token.grant.holder) : null,
      tokenDigest: admission.digestHex,
      token: !keepToken || !token ? null : admission.ok ? admission.text : toBase64Url(token.bytes),
      barrierBefore: fields.barrierBefore === undefined ? null : fields.barrierBefore.toString(),
      barrierAfter: fields.barrierAfter === undefined ? null : fields.barrierAfter.toString(),
      version: fields.version,
      conflictingToken: fields.conflictingToken ? toBase64Url(fields.conflictingToken) : null,
      errorCode: admission.ok ? null : admission.errorCode,
    };
  }

  /**
   * The answer to a request refused at admission. Adapters write nothing for it: the decision read no store, so a
   * log entry would prove nothing about the store's history, and anyone can send such requests, so each must not
   * cost a durable write. Only the metrics count it.
   */
  refusedAtAdmission(request: GuardRequest, refusal: Extract<Admission, { ok: false }>): GuardRefused {
    this.#observer?.attempt(request.op ?? 'write', refusal.reason);
    return {
      ok: false,
      reason: refusal.reason,
      seq: null,
      message: refusal.message,
      barrier: null,
      errorCode: refusal.errorCode,
    };
  }

  /**
   * After the adapter has committed an entry: metrics, and the alarm for a
   * conflict (it is raised only once the evidence is durable).
   */
  committed(entry: GuardLogEntry): void {
    this.#observer?.attempt(entry.op, entry.outcome);
    if (entry.outcome === 'conflict') {
      this.#observer?.conflict(entry.resource);
      this.#logger.error(
        {
          resource: entry.resource,
          epoch: entry.epoch,
          seq: entry.seq,
          tokenDigest: entry.tokenDigest,
          token: entry.token,
          conflictingToken: entry.conflictingToken,
        },
        'two different valid tokens for one (resource, epoch): more than f replicas are faulty; write refused, both tokens kept in the guard log',
      );
    }
  }
}

/** The refusal value for an entry the adapter has just committed. */
export function refusedResult(entry: GuardLogEntry, message: string, barrier: bigint | undefined): GuardRefused {
  return {
    ok: false,
    reason: entry.outcome as GuardRefusalReason,
    seq: entry.seq,
    message,
    barrier: barrier ?? null,
    errorCode: entry.errorCode,
  };
}

/** The message for a refusal the fence made. */
export function fenceMessage(decision: Extract<FenceDecision, { ok: false }>, epoch: bigint): string {
  switch (decision.reason) {
    case 'stale':
      return `epoch ${epoch} is below the barrier ${decision.barrier}`;
    case 'conflict':
      return `a different token already holds epoch ${decision.barrier}: more than f replicas are faulty`;
    case 'replayed':
      return 'the proof counter was already used for this token (or is too far below the highest one)';
  }
}

/** True when two barriers are the same record (nothing to store). */
export function sameBarrier(a: Barrier | undefined, b: Barrier): boolean {
  return (
    a !== undefined &&
    a.epoch === b.epoch &&
    bytesEqual(a.tokenDigest, b.tokenDigest) &&
    a.replay?.high === b.replay?.high &&
    a.replay?.seen === b.replay?.seen
  );
}
