/**
 * The reference resource as a real process for tests (build first: `npm test`
 * does), through the same launcher the demo and chaos runs use. Every
 * process started here is killed by `stopAllResources()` in an afterAll.
 */
import { startLocalResource } from '../../src/cluster/launcher.js';
import type { LocalProcess } from '../../src/cluster/local-process.js';

export interface ResourceProcess {
  readonly url: string;
  readonly running: boolean;
  /** Every JSON log line so far. */
  readonly lines: readonly Record<string, unknown>[];
  /** SIGTERM: waits for the graceful exit and resolves with the exit code. Another signal: sends it, waits, resolves with its name. */
  stop(signal?: NodeJS.Signals): Promise<number | string | null>;
}

const live = new Set<LocalProcess>();

export async function startResource(options: {
  clusterFile: string;
  dataDir: string;
  args?: string[];
}): Promise<ResourceProcess> {
  const server = await startLocalResource({
    clusterFile: options.clusterFile,
    dataDir: options.dataDir,
    extraArgs: options.args,
  });
  live.add(server);
  return {
    url: server.url,
    get running() {
      return server.running;
    },
    get lines() {
      return server.logLines();
    },
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (signal === 'SIGTERM') return server.stop();
      await server.kill(signal);
      return signal;
    },
  };
}

/** Kills every resource process still running (for afterAll/afterEach). */
export async function stopAllResources(): Promise<void> {
  await Promise.all([...live].map((server) => server.kill('SIGKILL')));
  live.clear();
}
