/**
 * A lease holder in its own process (holder-child.ts), driven over stdin and
 * stdout, that a test or chaos run can pause (SIGSTOP) and resume (SIGCONT):
 * the Jepsen lock-set + pause case. While it is stopped, commands wait in the
 * pipe; answers come after SIGCONT.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { QuorumFenceError } from '../common/errors.js';
import { replicaEntryPoint } from '../cluster/launcher.js';

/** The compiled child script, beside the other compiled testing modules. */
export function holderChildPath(): string {
  return join(dirname(replicaEntryPoint()), '..', 'src', 'testing', 'holder-child.js');
}

/** Node start-up, BLS backend load and t handshakes: a second or two; 20 s tolerates a loaded machine. */
const START_TIMEOUT_MS = 20_000;

export type HolderCommand =
  | {
      readonly cmd: 'acquire';
      readonly resource: string;
      readonly ttlMs: number;
      readonly waitMs?: number;
      readonly autoRenew?: boolean;
    }
  | { readonly cmd: 'increment'; readonly resource: string; readonly key?: string; readonly checkLease?: boolean }
  | { readonly cmd: 'release'; readonly resource: string }
  /** Follow the endorsed membership in `candidate` (a file), reaching its replicas at `endpoints`. */
  | { readonly cmd: 'follow'; readonly candidate: string; readonly endpoints: readonly string[] };

export type HolderAnswer = Readonly<Record<string, unknown>>;

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export class HolderProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<number | string>;
  #nextId = 1;
  readonly #waiting = new Map<number, (answer: HolderAnswer) => void>();
  #stderr = '';

  private constructor(child: ChildProcess) {
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  }

  /**
   * Spawns a holder connected to the cluster in `clusterFile` and writing through the resource at `resourceUrl`.
   * @throws QuorumFenceError TIMEOUT, INTERNAL (it exited first)
   */
  static async start(options: {
    clusterFile: string;
    resourceUrl: string;
    env?: NodeJS.ProcessEnv;
  }): Promise<HolderProcess> {
    const child = spawn(
      process.execPath,
      [holderChildPath(), '--cluster', options.clusterFile, '--resource', options.resourceUrl],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { ...process.env, ...options.env },
      },
    );
    live.add(child);
    child.once('exit', () => live.delete(child));
    child.stdin!.on('error', () => undefined);
    const holder = new HolderProcess(child);
    child
      .stderr!.setEncoding('utf8')
      .on('data', (chunk: string) => (holder.#stderr = (holder.#stderr + chunk).slice(-4096)));
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new QuorumFenceError(
              'TIMEOUT',
              `holder process did not start in ${START_TIMEOUT_MS} ms: ${holder.#stderr}`,
            ),
          ),
        START_TIMEOUT_MS,
      );
      createInterface({ input: child.stdout! }).on('line', (line) => {
        let message: Record<string, unknown>;
        try {
          message = JSON.parse(line) as Record<string, unknown>;
        } catch {
          return;
        }
        if (message.event === 'ready') {
          clearTimeout(timer);
          resolve();
          return;
        }
        const id = message.id as number;
        const waiter = holder.#waiting.get(id);
        holder.#waiting.delete(id);
        waiter?.(message);
      });
      void holder.exited.then((code) => {
        clearTimeout(timer);
        reject(new QuorumFenceError('INTERNAL', `holder process exited (${code}): ${holder.#stderr}`));
      });
    });
    try {
      await ready;
    } catch (error) {
      child.kill('SIGKILL');
      throw error;
    }
    return holder;
  }

  get pid(): number {
    return this.child.pid ?? 0;
  }

  /**
   * Sends a command and resolves with its answer (which waits while the process is stopped).
   * @throws QuorumFenceError TIMEOUT after `timeoutMs`, CLOSED when the process exits first
   */
  request(command: HolderCommand, timeoutMs = 30_000): Promise<HolderAnswer> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(id);
        reject(new QuorumFenceError('TIMEOUT', `holder did not answer ${command.cmd} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiting.set(id, (answer) => {
        clearTimeout(timer);
        resolve(answer);
      });
      void this.exited.then(() => {
        if (this.#waiting.delete(id)) {
          clearTimeout(timer);
          reject(
            new QuorumFenceError('CLOSED', `holder process exited before answering ${command.cmd}: ${this.#stderr}`),
          );
        }
      });
      this.child.stdin!.write(JSON.stringify({ id, ...command }) + '\n');
    });
  }

  pause(): void {
    this.child.kill('SIGSTOP');
  }

  resume(): void {
    this.child.kill('SIGCONT');
  }

  /** Closes stdin (it releases and exits); SIGKILL after `graceMs`. */
  async stop(graceMs = 3_000): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.resume();
    this.child.stdin!.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}
