/**
 * Runs the compiled `quorumfence` command as a real process (build first:
 * `npm test` does). Bounded by a timeout so a hung verb fails the test.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const CLI_PATH = fileURLToPath(new URL('../../dist/nodes/quorumfence.js', import.meta.url));
/** The development tools' command (demo, chaos, bench, worker). */
export const DEV_CLI_PATH = fileURLToPath(new URL('../../dist/nodes/quorumfence-dev.js', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(
  args: string[],
  options: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; program?: string } = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [options.program ?? CLI_PATH, ...args], {
      env: { ...process.env, ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`quorumfence ${args.join(' ')} did not finish in ${options.timeoutMs ?? 30_000} ms\n${stderr}`));
    }, options.timeoutMs ?? 30_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(options.input ?? '');
  });
}

/** Runs the compiled `quorumfence-dev` command (demo, chaos, bench, worker) the same way. */
export function runDevCli(
  args: string[],
  options: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<CliResult> {
  return runCli(args, { ...options, program: DEV_CLI_PATH });
}
