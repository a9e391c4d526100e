/**
 * Token verification for guards, with a bounded cache of successful
 * verifications: a holder that writes many times with one token pays one
 * pairing. The cache is keyed by the token's canonical text form, which is a
 * bijection with its exact bytes (the base64url decoder refuses any other
 * spelling), so a hit means "these exact bytes verified before", the same as
 * keying by their digest, without hashing on every hit. Failures are never
 * cached (they are cheap to repeat for the honest, and caching them would let
 * a peer fill the cache with garbage). No clock is read here (S6); latency is
 * measured, if at all, by the injected observer.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { QuorumFenceError, type ErrorCode } from '../common/errors.js';
import { copyBytes, fromBase64Url, toBase64Url, toHex } from '../common/bytes.js';
import { expectInteger } from '../common/check.js';
import type { Cluster } from '../cluster/description.js';
import {
  decodeToken,
  MAX_TOKEN_BYTES,
  MAX_TOKEN_TEXT_LENGTH,
  verifyToken,
  verifyTokenBatched,
  type AdmissionToken,
  type TokenVerification,
} from '../token/admission-token.js';

// The token decoder's bounds: longer input is refused before any decoding, here before the cache is even asked.
export { MAX_TOKEN_BYTES, MAX_TOKEN_TEXT_LENGTH };

/** Optional instrumentation; the process that owns the metrics implements it. */
export interface VerifierObserver {
  /** Called once per check of base64url-clean input: was it in the cache? */
  cacheLookup(hit: boolean): void;
  /**
   * Runs the decoding and pairing check of a cache miss (a promise of them, when batched); may time it.
   * Must return `verify()`'s result.
   */
  timeVerify<T>(verify: () => T): T;
}

/** A token that verified, with the forms the guard log needs computed once. */
export interface VerifiedTokenInfo {
  readonly token: AdmissionToken;
  /** SHA-256 of the token bytes. */
  readonly digest: Uint8Array;
  readonly digestHex: string;
  /** Canonical text form (base64url). */
  readonly text: string;
  readonly holderHex: string;
}

export type VerifiedToken =
  | ({ readonly ok: true; readonly cached: boolean } & VerifiedTokenInfo)
  | {
      readonly ok: false;
      readonly reason: 'missing_token' | 'malformed';
      readonly code: ErrorCode | null;
      readonly message: string;
    }
  | {
      readonly ok: false;
      readonly reason: 'bad_token' | 'wrong_cluster';
      readonly code: null;
      readonly message: string;
      /** The token did decode, so the log can name it. */
      readonly token: AdmissionToken;
      readonly digestHex: string;
    };

/** What a cache miss goes on with once its input passed the cheap checks. */
interface Miss {
  readonly bytes: Uint8Array;
  readonly text: string;
  readonly digest: Uint8Array;
}

/** A miss after decoding and the signature check. */
type Checked =
  | { ok: true; token: AdmissionToken }
  | { ok: false; reason: 'malformed'; code: ErrorCode; message: string }
  | { ok: false; reason: 'bad_token' | 'wrong_cluster'; code: null; message: string; token: AdmissionToken };

export interface TokenVerifierOptions {
  /** How many verified tokens to remember. Default DEFAULT_TOKEN_CACHE_SIZE. */
  readonly cacheSize?: number;
  readonly observer?: VerifierObserver;
}

/** Each entry holds a decoded token (~0.5 KiB); 4096 covers many concurrent holders in a few MiB. */
export const DEFAULT_TOKEN_CACHE_SIZE = 4096;

export class TokenVerifier {
  readonly #cluster: Cluster;
  readonly #cacheSize: number;
  readonly #observer: VerifierObserver | undefined;
  /** Map iteration order is insertion order: re-inserting on a hit makes it an LRU. */
  readonly #cache: BoundedMap<string, VerifiedTokenInfo>;

  /** @throws QuorumFenceError INVALID_ARGUMENT for a bad cacheSize. */
  constructor(cluster: Cluster, options: TokenVerifierOptions = {}) {
    this.#cluster = cluster;
    this.#cacheSize = expectInteger(options.cacheSize ?? DEFAULT_TOKEN_CACHE_SIZE, 0, 1 << 24, 'cacheSize');
    this.#cache = new BoundedMap(this.#cacheSize);
    this.#observer = options.observer;
  }

  get cacheEntries(): number {
    return this.#cache.size;
  }

  /**
   * Decodes and verifies a token given as text (base64url) or bytes. Every
   * failure is a value; nothing here throws for bad input.
   */
  verify(input: string | Uint8Array | undefined): VerifiedToken {
    const miss = this.#lookupOrRefuse(input);
    if (!('bytes' in miss)) return miss;
    const check = (): Checked => {
      const decoded = this.#decode(miss.bytes);
      return decoded.ok ? this.#judge(decoded.token, verifyToken(decoded.token, this.#cluster)) : decoded;
    };
    return this.#remember(miss, this.#observer ? this.#observer.timeVerify(check) : check());
  }

  /**
   * The same answers as `verify`, with the pairing check of a token not in the
   * cache run in one batch with the checks other requests asked for meanwhile
   * (src/crypto/verify-batch.ts): a guard with many writers bringing fresh
   * tokens pays well under one pairing each.
   */
  async verifyBatched(input: string | Uint8Array | undefined): Promise<VerifiedToken> {
    const miss = this.#lookupOrRefuse(input);
    if (!('bytes' in miss)) return miss;
    const check = async (): Promise<Checked> => {
      const decoded = this.#decode(miss.bytes);
      return decoded.ok ? this.#judge(decoded.token, await verifyTokenBatched(decoded.token, this.#cluster)) : decoded;
    };
    return this.#remember(miss, await (this.#observer ? this.#observer.timeVerify(check) : check()));
  }

  /** A cache hit, or a refusal that needs no decoding; otherwise the bytes and forms a miss goes on with. */
  #lookupOrRefuse(input: string | Uint8Array | undefined): VerifiedToken | Miss {
    if (input === undefined || input.length === 0) {
      return { ok: false, reason: 'missing_token', code: null, message: 'no admission token' };
    }
    let bytes: Uint8Array;
    let text: string;
    if (typeof input === 'string') {
      if (input.length > MAX_TOKEN_TEXT_LENGTH) {
        return {
          ok: false,
          reason: 'malformed',
          code: 'BAD_LENGTH',
          message: `admission token: longer than ${MAX_TOKEN_TEXT_LENGTH} characters`,
        };
      }
      text = input;
      const hit = this.#lookup(text);
      if (hit) return hit;
      try {
        bytes = fromBase64Url(input, 'admission token');
      } catch (error) {
        if (error instanceof QuorumFenceError)
          return { ok: false, reason: 'malformed', code: error.code, message: error.message };
        throw error;
      }
    } else {
      if (input.length > MAX_TOKEN_BYTES) {
        return {
          ok: false,
          reason: 'malformed',
          code: 'BAD_LENGTH',
          message: `admission token: longer than ${MAX_TOKEN_BYTES} bytes`,
        };
      }
      // A copy: the caller may reuse its buffer, and the cache keeps what decodes from it.
      bytes = copyBytes(input);
      text = toBase64Url(bytes);
      const hit = this.#lookup(text);
      if (hit) return hit;
    }
    this.#observer?.cacheLookup(false);
    return { bytes, text, digest: sha256(bytes) };
  }

  /** A checked miss as the caller's answer; a token that verified is cached. */
  #remember(miss: Miss, checked: Checked): VerifiedToken {
    const digestHex = toHex(miss.digest);
    if (!checked.ok) {
      if (checked.reason === 'malformed') return checked;
      return { ...checked, digestHex };
    }
    const token = checked.token;
    const info: VerifiedTokenInfo = {
      token,
      digest: miss.digest,
      digestHex,
      text: miss.text,
      holderHex: toHex(token.grant.holder),
    };
    this.#cache.set(miss.text, info);
    return { ok: true, cached: false, ...info };
  }

  /** Decoding with the point checks: the part of a miss before its pairing. */
  #decode(bytes: Uint8Array): Extract<Checked, { ok: true } | { reason: 'malformed' }> {
    try {
      return { ok: true, token: decodeToken(bytes, this.#cluster.backend) };
    } catch (error) {
      if (error instanceof QuorumFenceError)
        return { ok: false, reason: 'malformed', code: error.code, message: error.message };
      throw error;
    }
  }

  /** The pairing's verdict on a decoded token, in the guard's terms. */
  #judge(token: AdmissionToken, verdict: TokenVerification): Checked {
    if (verdict.ok) return { ok: true, token };
    return {
      ok: false,
      reason: verdict.reason === 'bad_signature' ? 'bad_token' : 'wrong_cluster',
      code: null,
      message: verdict.message,
      token,
    };
  }

  #lookup(text: string): VerifiedToken | undefined {
    const info = this.#cache.get(text);
    if (!info) return undefined;
    // Re-inserting moves the entry to the young end: the map's order is the LRU order.
    this.#cache.delete(text);
    this.#cache.set(text, info);
    this.#observer?.cacheLookup(true);
    return { ok: true, cached: true, ...info };
  }
}
