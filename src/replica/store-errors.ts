/** The error every part of the signing record raises for a damaged or foreign store. */
import { QuorumFenceError } from '../common/errors.js';

export function storeCorrupt(dir: string, message: string, cause?: unknown): QuorumFenceError {
  return new QuorumFenceError(
    'STORE_CORRUPT',
    `signing record in ${dir}: ${message}`,
    { dir },
    cause === undefined ? undefined : { cause },
  );
}
