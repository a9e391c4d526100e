/**
 * One quorumfence server as a local child process: spawned from the compiled
 * entry point, its actual url read from its "listening" log line, ready once
 * its /healthz answers 200, stopped with SIGTERM (SIGKILL after a grace
 * period). Replicas, the reference resource and Byzantine replicas all start
 * this way, for tests, the demo, chaos runs and benchmarks.
 *
 * No orphans: children get QUORUMFENCE_EXIT_WITH_STDIN=1 and a stdin pipe, so
 * they stop when this process dies, even by SIGKILL; this process's exit
 * kills whatever is left.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';
import { QuorumFenceError } from '../common/errors.js';

export interface LocalProcessOptions {
  /** For messages: "replica 3", "resource". */
  readonly name: string;
  /** The compiled entry point (a .js file run with this node). */
  readonly entry: string;
  /** Arguments after the entry point, given the port to listen on (0 the first time, the same port on restarts). */
  readonly args: (port: number) => readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  /** Flags for node itself, before the entry point (the benchmark's --cpu-prof). */
  readonly nodeArgs?: readonly string[];
  /** How long to listen and pass /healthz (default 30 s: a loaded 2-core CI box). */
  readonly startTimeoutMs?: number;
}

export interface LocalProcess {
  readonly name: string;
  /** The url from the "listening" line (ws:// for replicas, http:// for the resource); same across restarts. */
  readonly url: string;
  readonly healthUrl: string;
  readonly port: number;
  /** The current process id (changes on restart); 0 before the first start. */
  readonly pid: number;
  readonly running: boolean;
  start(): Promise<void>;
  /** SIGTERM and wait for the exit (SIGKILL after 15 s); resolves with the exit code. */
  stop(): Promise<number | null>;
  /** Send a signal (default SIGKILL) and wait for the exit (SIGSTOP and SIGCONT return at once). */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Stop it if running, then start it again on the same port. */
  restart(): Promise<void>;
  /** The last lines the process wrote to stderr (for error messages). */
  stderrTail(): string;
  /** Every JSON log line the current process wrote to stdout so far (bounded). */
  logLines(): readonly Record<string, unknown>[];
}

const DEFAULT_START_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 15_000;
/** Enough stderr to show a stack trace, bounded so a chatty child cannot grow the parent. */
const TAIL_BYTES = 8 * 1024;
const MAX_LOG_LINES = 1_000;

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
}

function getHealth(url: string): Promise<number> {
  return new Promise((resolveStatus) => {
    const get = url.startsWith('https:') ? httpsGet : httpGet;
    // Health only: a local self-signed test certificate is fine here.
    const req = get(url, { timeout: 2_000, rejectUnauthorized: false }, (res) => {
      res.resume();
      resolveStatus(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolveStatus(0));
  });
}

class ChildServer implements LocalProcess {
  readonly name: string;
  url = '';
  healthUrl = '';
  port = 0;
  #child: ChildProcess | undefined;
  #exited: Promise<number | null> = Promise.resolve(null);
  #stderr = '';
  #logs: Record<string, unknown>[] = [];
  readonly #options: LocalProcessOptions;

  constructor(options: LocalProcessOptions) {
    this.name = options.name;
    this.#options = options;
  }

  get pid(): number {
    return this.#child?.pid ?? 0;
  }

  get running(): boolean {
    return this.#child !== undefined && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  stderrTail(): string {
    return this.#stderr.trim();
  }

  logLines(): readonly Record<string, unknown>[] {
    return this.#logs;
  }

  #failure(code: 'INTERNAL' | 'TIMEOUT', message: string): QuorumFenceError {
    return new QuorumFenceError(
      code,
      `${this.name} ${message}; stderr: ${this.stderrTail().slice(-2000) || '(empty)'}`,
      {
        name: this.name,
        stderr: this.stderrTail(),
      },
    );
  }

  async start(): Promise<void> {
    if (this.running) throw new QuorumFenceError('INVALID_ARGUMENT', `${this.name} is already running`);
    const timeoutMs = this.#options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
    this.#stderr = '';
    this.#logs = [];
    const child = spawn(
      process.execPath,
      [...(this.#options.nodeArgs ?? []), this.#options.entry, ...this.#options.args(this.port)],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { ...process.env, QUORUMFENCE_EXIT_WITH_STDIN: '1', ...this.#options.env },
      },
    );
    this.#child = child;
    track(child);
    this.#exited = new Promise((r) => child.once('exit', (code, signal) => r(code ?? (signal ? -1 : null))));
    child.stdin!.on('error', () => undefined);
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      this.#stderr = (this.#stderr + chunk).slice(-TAIL_BYTES);
    });
    const exitedEarly = this.#exited.then((code) => {
      throw this.#failure('INTERNAL', `exited (${code}) while starting`);
    });
    const listening = new Promise<string>((resolveUrl) => {
      let buffered = '';
      child.stdout!.setEncoding('utf8');
      child.stdout!.on('data', (chunk: string) => {
        buffered += chunk;
        let newline;
        while ((newline = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, newline);
          buffered = buffered.slice(newline + 1);
          let entry: Record<string, unknown>;
          try {
            entry = JSON.parse(line) as Record<string, unknown>;
          } catch {
            continue; // Not a log line.
          }
          if (this.#logs.length < MAX_LOG_LINES) this.#logs.push(entry);
          if (entry.msg === 'listening' && typeof entry.url === 'string') resolveUrl(entry.url);
        }
      });
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(this.#failure('TIMEOUT', `did not become healthy within ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      const url = await Promise.race([listening, exitedEarly, timeout]);
      this.url = url;
      this.port = Number(new URL(url).port);
      this.healthUrl = url.replace(/^ws/, 'http').replace(/\/+$/, '') + '/healthz';
      // The server logs "listening" only when ready, but /healthz is the contract.
      const healthy = (async () => {
        while ((await getHealth(this.healthUrl)) !== 200) await new Promise((r) => setTimeout(r, 50));
      })();
      await Promise.race([healthy, exitedEarly, timeout]);
    } catch (error) {
      child.kill('SIGKILL');
      await this.#exited;
      throw error;
    } finally {
      clearTimeout(timer);
      exitedEarly.catch(() => undefined);
    }
  }

  async stop(): Promise<number | null> {
    if (!this.running) return this.#exited;
    this.#child!.kill('SIGCONT'); // A paused process cannot handle SIGTERM.
    this.#child!.kill('SIGTERM');
    const timer = setTimeout(() => this.#child?.kill('SIGKILL'), STOP_GRACE_MS);
    try {
      return await this.#exited;
    } finally {
      clearTimeout(timer);
    }
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.running) return;
    this.#child!.kill(signal);
    if (signal === 'SIGSTOP' || signal === 'SIGCONT' || signal === 'SIGUSR1' || signal === 'SIGUSR2') return;
    await this.#exited;
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }
}

/** A local server process, not yet started. */
export function localProcess(options: LocalProcessOptions): LocalProcess {
  return new ChildServer(options);
}

/** Formats a listen address for a host (IPv6 in brackets). */
export function listenAddress(host: string, port: number): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`;
}
