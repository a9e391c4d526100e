/**
 * Pairing checks that arrive together are verified together. A check asked
 * for is queued and run once the event loop has handled the I/O already
 * waiting (setImmediate), with every other check queued meanwhile, as one
 * `verifyAll`: with the native backend a batch of k costs k + 1 Miller loops
 * and one final exponentiation instead of 2k and k. A lone check waits for
 * nothing but the rest of the current I/O phase; a longer queue is worked
 * off one batch per turn, so a burst of honest checks never holds the event
 * loop for more than one batch's pairings (about 2 ms for 8). When a batch
 * fails, each of its checks is run alone, so one bad signature never fails
 * another's check; that costs one batch more than checking alone would,
 * which bounds what a peer sending bad signatures can make a batch cost.
 *
 * Meant for checks on a latency path with concurrency around them: the
 * client's token check (many acquires in one process) and a guard's check of
 * tokens it has not seen (many writers). One batcher per backend per process.
 */
import type { BlsBackend, PublicKey, Signature, VerificationSet } from './backend.js';

/**
 * Checks per batch at most. The per-check cost falls steeply to about 8
 * (`npm run bench -- crypto`, "verify token, batches of k") and little after,
 * while every check in a batch waits for the whole batch.
 */
export const MAX_VERIFY_BATCH = 8;

/** After the I/O already waiting; browsers (the universal verifier's bundle imports this module) have no setImmediate. */
const afterPendingIo: (run: () => void) => void =
  typeof setImmediate === 'function' ? (run) => setImmediate(run) : (run) => setTimeout(run, 0);

interface Pending extends VerificationSet {
  readonly settle: (valid: boolean) => void;
}

export class VerifyBatcher {
  readonly #backend: BlsBackend;
  readonly #maxBatch: number;
  readonly #schedule: (run: () => void) => void;
  #queue: Pending[] = [];
  #scheduled = false;
  #batches = 0;
  #checks = 0;

  /** @param schedule runs a batch later (default: after the I/O already waiting; the simulator's is virtual time). */
  constructor(backend: BlsBackend, maxBatch = MAX_VERIFY_BATCH, schedule = afterPendingIo) {
    this.#backend = backend;
    this.#maxBatch = Math.max(1, Math.floor(maxBatch));
    this.#schedule = schedule;
  }

  /** Batches run so far, of any size (for tests and the bench). */
  get batches(): number {
    return this.#batches;
  }

  /** Checks answered so far. */
  get checks(): number {
    return this.#checks;
  }

  /** Resolves to what `backend.verify` would return; never rejects. */
  verify(publicKey: PublicKey, message: Uint8Array, signature: Signature): Promise<boolean> {
    return new Promise<boolean>((settle) => {
      this.#queue.push({ publicKey, message, signature, settle });
      if (!this.#scheduled) {
        this.#scheduled = true;
        this.#schedule(() => this.#run());
      }
    });
  }

  /** One batch per turn: I/O that arrives meanwhile is served between batches, and its checks join the next. */
  #run(): void {
    const batch = this.#queue.splice(0, this.#maxBatch);
    if (this.#queue.length > 0) this.#schedule(() => this.#run());
    else this.#scheduled = false;
    this.#settle(batch);
  }

  #settle(batch: readonly Pending[]): void {
    this.#batches++;
    this.#checks += batch.length;
    if (batch.length === 1) {
      const only = batch[0]!;
      only.settle(this.#verifyOne(only));
      return;
    }
    let together: boolean;
    try {
      together = this.#backend.verifyAll(batch);
    } catch {
      together = false;
    }
    for (const check of batch) check.settle(together || this.#verifyOne(check));
  }

  #verifyOne(check: VerificationSet): boolean {
    try {
      return this.#backend.verify(check.publicKey, check.message, check.signature);
    } catch {
      return false;
    }
  }
}

const batchers = new WeakMap<BlsBackend, VerifyBatcher>();

/**
 * Makes `batcher` the one `verifyBatcherFor(backend)` returns: the simulator's backends defer their checks on
 * virtual time (src/simulation/crypto.ts).
 */
export function installVerifyBatcher(backend: BlsBackend, batcher: VerifyBatcher): void {
  batchers.set(backend, batcher);
}

/** The process's batcher for `backend` (made on first use). */
export function verifyBatcherFor(backend: BlsBackend): VerifyBatcher {
  let batcher = batchers.get(backend);
  if (!batcher) {
    batcher = new VerifyBatcher(backend);
    batchers.set(backend, batcher);
  }
  return batcher;
}
