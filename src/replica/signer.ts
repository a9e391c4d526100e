/**
 * Computes partial signatures: in the calling thread (`workers: 0`) or on
 * worker threads, one BLS key handle per thread. BLS signing is pure CPU
 * (0.3 to 0.8 ms with blst on the machines measured), so threads are what
 * lets a replica use more than one core. Requests made in one event-loop turn
 * go to a thread as one batch, which keeps the message overhead per signature
 * small.
 *
 * A hand-off costs two messages and a thread wake-up, about as much CPU as a
 * third of the signature itself, and it only pays when the calling thread is
 * the bottleneck. So with threads (`inline` given), where a signature is made
 * follows how busy the calling thread's event loop is (`signInThisThread`):
 *   - not busy: every signature is made here, with no hand-off;
 *   - busy: one signature per event-loop turn is made here while every thread
 *     is idle, and the rest of a burst goes to the threads.
 * Signing runs while the grant's record is being flushed by the store's own
 * thread, so the calling thread has the time.
 */
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { QuorumFenceError } from '../common/errors.js';
import { SIGNATURE_BYTES, type BlsBackend, type SecretKey } from '../crypto/backend.js';

export interface PartialSigner {
  /** Threads used; 0 means the calling thread. */
  readonly workers: number;
  /** The 96-byte partial signature of `message` under the replica's share. @throws QuorumFenceError INTERNAL */
  sign(message: Uint8Array): Promise<Uint8Array>;
  close(): Promise<void>;
}

/** Signs in the calling thread. */
export function inThreadSigner(backend: BlsBackend, secretKey: SecretKey): PartialSigner {
  return {
    workers: 0,
    sign: async (message) => backend.sign(secretKey, message).bytes,
    close: async () => undefined,
  };
}

interface Pending {
  readonly resolve: (signature: Uint8Array) => void;
  readonly reject: (error: unknown) => void;
}

interface Lane {
  readonly worker: Worker;
  /** Requests not yet posted (this turn's batch). */
  outbox: { message: Uint8Array; pending: Pending }[];
  /** Posted batches by id. */
  readonly inFlight: Map<number, Pending[]>;
  load: number;
}

export interface WorkerSignerOptions {
  readonly workers: number;
  /** The parsed cluster description and replica key file: each thread checks and loads the key itself. */
  readonly cluster: unknown;
  readonly key: unknown;
  readonly backend: BlsBackend['name'];
  /** Called once if a thread dies; the replica then stops, since it can no longer sign. */
  readonly onFatal?: (error: Error) => void;
  /** How long a thread may take to load the key. */
  readonly startTimeoutMs?: number;
  /** The same key in this thread: with it, requests are signed here while this thread is not busy (signInThisThread). */
  readonly inline?: { readonly backend: BlsBackend; readonly secretKey: SecretKey };
  /** The share of time this thread's event loop was busy lately, 0..1 (default: eventLoopMeter()). */
  readonly loopUtilization?: () => number;
}

/**
 * The event loop's utilization at which signatures start going to the threads, and the one below which they come
 * back: apart, so that moving the signing (about half a replica's main-thread work) does not flip the choice back
 * at once. Measured on 2 cores (bench system, docs/performance.md run 13): four replicas sharing them with 16
 * clients ran at 0.2 to 0.35 each, and signing there took 0.72 ms of CPU per grant off all processes (mean of four
 * pairs); one replica driven to its limit (bench replica) still gets its threads' throughput.
 */
export const BUSY_LOOP_ABOVE = 0.7;
export const IDLE_LOOP_BELOW = 0.4;

/** Whether the event loop counts as busy now, given whether it did before (hysteresis between the two levels). */
export function loopIsBusy(wasBusy: boolean, utilization: number): boolean {
  return wasBusy ? utilization > IDLE_LOOP_BELOW : utilization >= BUSY_LOOP_ABOVE;
}

/**
 * Where one signature is made: here whenever the loop is not busy; when it is, here only as the first of its turn
 * while every thread is idle (a lone grant skips the hand-off), and on a thread otherwise.
 */
export function signInThisThread(state: {
  readonly loopBusy: boolean;
  readonly signedHereThisTurn: boolean;
  readonly threadsIdle: boolean;
}): boolean {
  return !state.loopBusy || (!state.signedHereThisTurn && state.threadsIdle);
}

/**
 * The event loop's utilization (performance.eventLoopUtilization) over the last full window of `windowMs`, read
 * lazily: no timer, and a reading after a quiet spell covers the quiet spell.
 */
export function eventLoopMeter(windowMs = 100): () => number {
  let mark = performance.eventLoopUtilization();
  let markedAt = performance.now();
  let utilization = 0;
  return () => {
    const now = performance.now();
    if (now - markedAt >= windowMs) {
      const current = performance.eventLoopUtilization();
      utilization = performance.eventLoopUtilization(current, mark).utilization;
      mark = current;
      markedAt = now;
    }
    return utilization;
  };
}

/** Loading noble or blst and checking the share takes well under a second; 20 s allows a loaded CI machine. */
const DEFAULT_WORKER_START_TIMEOUT_MS = 20_000;

/**
 * Starts `workers` signing threads and resolves when every one has loaded the key.
 * @throws QuorumFenceError INTERNAL when a thread cannot start; the key errors (SHARE_MISMATCH, ...) as a thread reports them.
 */
export async function startWorkerSigner(options: WorkerSignerOptions): Promise<PartialSigner> {
  const url = new URL('./signing-worker.js', import.meta.url);
  const lanes: Lane[] = [];
  let nextBatch = 1;
  let closing = false;
  let failed = false;

  const failLane = (lane: Lane, error: Error): void => {
    for (const pendings of lane.inFlight.values()) for (const p of pendings) p.reject(error);
    for (const { pending } of lane.outbox) pending.reject(error);
    lane.inFlight.clear();
    lane.outbox = [];
    if (!closing && !failed) {
      failed = true;
      options.onFatal?.(error);
    }
  };

  const startLane = (): Promise<Lane> =>
    new Promise((resolve, reject) => {
      const worker = new Worker(url, {
        workerData: { cluster: options.cluster, key: options.key, backend: options.backend },
      });
      const lane: Lane = { worker, outbox: [], inFlight: new Map(), load: 0 };
      const timer = setTimeout(() => {
        reject(new QuorumFenceError('INTERNAL', 'a signing thread did not start in time'));
        void worker.terminate();
      }, options.startTimeoutMs ?? DEFAULT_WORKER_START_TIMEOUT_MS);
      worker.on(
        'message',
        (m: { ready?: true; fatal?: string; batch?: number; signatures?: Uint8Array; error?: string }) => {
          if (m.ready) {
            clearTimeout(timer);
            resolve(lane);
            return;
          }
          if (m.fatal !== undefined) {
            clearTimeout(timer);
            reject(new QuorumFenceError('INTERNAL', `signing thread: ${m.fatal}`));
            void worker.terminate();
            return;
          }
          const pendings = lane.inFlight.get(m.batch!);
          if (!pendings) return;
          lane.inFlight.delete(m.batch!);
          lane.load -= pendings.length;
          if (m.signatures) {
            pendings.forEach((p, k) => p.resolve(m.signatures!.slice(k * SIGNATURE_BYTES, (k + 1) * SIGNATURE_BYTES)));
          } else {
            const error = new QuorumFenceError('INTERNAL', `signing failed: ${m.error}`);
            for (const p of pendings) p.reject(error);
          }
        },
      );
      worker.on('error', (error) => {
        clearTimeout(timer);
        reject(error);
        failLane(
          lane,
          new QuorumFenceError('INTERNAL', `a signing thread failed: ${error.message}`, undefined, { cause: error }),
        );
      });
      worker.on('exit', (code) => {
        clearTimeout(timer);
        reject(new QuorumFenceError('INTERNAL', `a signing thread exited (${code}) while starting`));
        failLane(lane, new QuorumFenceError('INTERNAL', `a signing thread exited (${code})`));
      });
    });

  const started = await Promise.allSettled(Array.from({ length: options.workers }, startLane));
  for (const s of started) if (s.status === 'fulfilled') lanes.push(s.value);
  const failure = started.find((s) => s.status === 'rejected');
  if (failure) {
    closing = true;
    await Promise.all(lanes.map((l) => l.worker.terminate()));
    const reason = (failure as PromiseRejectedResult).reason as unknown;
    throw reason instanceof QuorumFenceError
      ? reason
      : new QuorumFenceError('INTERNAL', `signing thread: ${String(reason)}`);
  }

  const flush = (lane: Lane): void => {
    const outbox = lane.outbox;
    lane.outbox = [];
    if (outbox.length === 0) return;
    const batch = nextBatch++;
    lane.inFlight.set(
      batch,
      outbox.map((o) => o.pending),
    );
    lane.worker.postMessage({ batch, messages: outbox.map((o) => o.message) });
  };

  // Set by a signature made in this thread, cleared on the next turn of the event loop (when the loop is busy: at
  // most one per turn there).
  let signedHereThisTurn = false;
  let loopBusy = false;
  const inline = options.inline;
  const loopUtilization = options.loopUtilization ?? eventLoopMeter();

  return {
    workers: lanes.length,
    sign(message) {
      if (closing) return Promise.reject(new QuorumFenceError('CLOSED', 'the signer is closed'));
      if (failed) return Promise.reject(new QuorumFenceError('INTERNAL', 'a signing thread died'));
      loopBusy = loopIsBusy(loopBusy, loopUtilization());
      if (
        inline &&
        signInThisThread({ loopBusy, signedHereThisTurn, threadsIdle: lanes.every((lane) => lane.load === 0) })
      ) {
        if (!signedHereThisTurn) {
          signedHereThisTurn = true;
          setImmediate(() => (signedHereThisTurn = false));
        }
        try {
          return Promise.resolve(inline.backend.sign(inline.secretKey, message).bytes);
        } catch (error) {
          return Promise.reject(
            new QuorumFenceError('INTERNAL', `signing failed: ${(error as Error).message}`, undefined, {
              cause: error,
            }),
          );
        }
      }
      return new Promise((resolve, reject) => {
        let lane = lanes[0]!;
        for (const candidate of lanes) if (candidate.load < lane.load) lane = candidate;
        lane.load++;
        if (lane.outbox.push({ message, pending: { resolve, reject } }) === 1) queueMicrotask(() => flush(lane));
      });
    },
    async close() {
      closing = true;
      // Let posted batches finish: a grant already recorded should still get its partial out.
      const deadline = Date.now() + 5_000;
      while (lanes.some((l) => l.inFlight.size > 0 || l.outbox.length > 0) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 5));
      }
      await Promise.all(lanes.map((l) => l.worker.terminate()));
    },
  };
}
