/**
 * The reference resource as a real process (build first: `npm test` does):
 * spawned from dist, its url read from the `listening` log line, and always
 * killed by `stopAllResources()` in an afterAll/afterEach. The child also
 * exits when our stdin pipe closes, so a crashed test runner leaves no orphan.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const RESOURCE_PATH = fileURLToPath(new URL('../../dist/nodes/resource.js', import.meta.url));
/** Start-up is node + LMDB open + BLS backend load: well under a second; 20 s tolerates a loaded CI box. */
const START_TIMEOUT_MS = 20_000;

export interface ResourceProcess {
  readonly url: string;
  readonly child: ChildProcess;
  /** Every JSON log line so far. */
  readonly lines: Record<string, unknown>[];
  /** Resolves with the exit code (or signal name) once the process is gone. */
  readonly exited: Promise<number | string>;
  /** Sends `signal` and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

const live = new Set<ChildProcess>();

export function startResource(options: { clusterFile: string; dataDir: string; args?: string[] }): Promise<ResourceProcess> {
  const child = spawn(
    process.execPath,
    [RESOURCE_PATH, '--cluster', options.clusterFile, '--data', options.dataDir, '--listen', '127.0.0.1:0', ...(options.args ?? [])],
    { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, QUORUMFENCE_EXIT_WITH_STDIN: '1' } },
  );
  live.add(child);
  const lines: Record<string, unknown>[] = [];
  let stderr = '';
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(code ?? signal ?? 'unknown');
    });
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`resource did not start in ${START_TIMEOUT_MS} ms\n${stderr}`));
    }, START_TIMEOUT_MS);
    let pending = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      pending += chunk;
      let newline: number;
      while ((newline = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        let json: Record<string, unknown>;
        try {
          json = JSON.parse(line) as Record<string, unknown>;
        } catch {
          continue;
        }
        lines.push(json);
        if (json.msg === 'listening') {
          clearTimeout(timer);
          resolve({
            url: json.url as string,
            child,
            lines,
            exited,
            stop: (signal = 'SIGTERM') => {
              if (child.exitCode === null && child.signalCode === null) child.kill(signal);
              return exited;
            },
          });
        }
      }
    });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`resource exited (${code}) before listening\n${stderr}`));
    });
  });
}

/** Kills every resource process still running (for afterAll/afterEach). */
export async function stopAllResources(): Promise<void> {
  await Promise.all(
    [...live].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
}
