/** The errors every part of the signing record raises for a damaged, foreign or missing store. */
import { QuorumFenceError } from '../common/errors.js';

export function storeCorrupt(dir: string, message: string, cause?: unknown): QuorumFenceError {
  return new QuorumFenceError(
    'STORE_CORRUPT',
    `signing record in ${dir}: ${message}`,
    { dir },
    cause === undefined ? undefined : { cause },
  );
}

/**
 * A writable open found no store and was not told to create one: the replica is new (then one of the commands
 * that know it creates it), or --data is wrong, or its volume was lost (then an empty record would sign again).
 */
export function storeMissing(dir: string): QuorumFenceError {
  return new QuorumFenceError(
    'STORE_MISSING',
    `no signing record in ${dir}, and a replica never starts from an empty one by itself (it would sign again ` +
      `what it signed before). If this replica is new, its record is made once, by one of: ` +
      `"quorumfence replica init --data ${dir} --cluster FILE --key FILE" (a new replica of a key that has signed ` +
      `nothing; "keygen --data" and "dkg run" make their replicas' records themselves), or ` +
      `"quorumfence reshare inherit --data ${dir} ..." (a new member after a reshare); a replica moved to new storage ` +
      `takes its exported record with "quorumfence replica import". If it had a record, --data names the wrong ` +
      `directory or its volume was lost: point --data at the record, or replace the replica by a reshare`,
    { dir },
  );
}
