/**
 * Structured logs (pino, JSON lines on stdout). Level from the `level`
 * option, else QUORUMFENCE_LOG_LEVEL, else info. Processes log; libraries take
 * an optional logger and are silent without one.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

export const LOG_LEVEL_ENVIRONMENT_VARIABLE = 'QUORUMFENCE_LOG_LEVEL';

export function createLogger(name: string, options: { level?: string; destination?: number } = {}): Logger {
  return pino(
    { name, level: options.level ?? process.env[LOG_LEVEL_ENVIRONMENT_VARIABLE] ?? 'info', base: { pid: process.pid } },
    pino.destination({ dest: options.destination ?? 1, sync: true }),
  );
}

/** A logger that drops everything: the default for library code. */
export const silentLogger: Logger = pino({ level: 'silent' });
