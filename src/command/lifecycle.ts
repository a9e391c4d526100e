/**
 * How a long-running verb (replica, resource, the Byzantine replica) waits to
 * be stopped: SIGTERM or SIGINT, or, when started with
 * QUORUMFENCE_EXIT_WITH_STDIN=1 by a launcher that holds its stdin, stdin
 * closing, so that no server outlives the process that started it.
 */
import type { Logger } from '../common/log.js';

export const EXIT_WITH_STDIN_ENVIRONMENT_VARIABLE = 'QUORUMFENCE_EXIT_WITH_STDIN';

export interface StopWatch {
  /** Resolves on the first signal, stdin end, or `stop()`. */
  readonly stopped: Promise<void>;
  stop(): void;
  /** Removes the handlers (after the server has closed). */
  dispose(): void;
}

export function watchForStop(logger: Logger): StopWatch {
  let stop: () => void = () => undefined;
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  const onSignal = (signal: NodeJS.Signals) => {
    logger.info({ signal }, 'stopping');
    stop();
  };
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  const watchStdin = process.env[EXIT_WITH_STDIN_ENVIRONMENT_VARIABLE] === '1';
  if (watchStdin) {
    process.stdin.on('end', stop);
    process.stdin.on('close', stop);
    process.stdin.resume();
  }
  return {
    stopped,
    stop,
    dispose() {
      if (watchStdin) process.stdin.pause();
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    },
  };
}
