/**
 * Which cluster and replica a signing record belongs to: kept in LMDB's meta
 * table and in `signing-record.json` beside it, so a store is never opened
 * for another cluster or replica, nor silently restarted from empty.
 */
import { fromHex, toHex } from '../common/bytes.js';
import { storeCorrupt as corrupt } from './store-errors.js';

export const STORE_FORMAT = 'quorumfence/signing-record-store/v1';

export interface StoreIdentity {
  readonly clusterId: Uint8Array;
  readonly replicaIndex: number;
}

interface IdentityJson {
  format: string;
  clusterId: string;
  replica: number;
}

export function parseIdentity(text: string | undefined, where: string): StoreIdentity {
  let json: Partial<IdentityJson>;
  try {
    json = JSON.parse(text ?? '') as Partial<IdentityJson>;
  } catch {
    throw corrupt(where, 'its identity is not valid JSON');
  }
  if (json.format !== STORE_FORMAT) throw corrupt(where, `unknown store format ${JSON.stringify(json.format)}`);
  let clusterId: Uint8Array;
  try {
    clusterId = fromHex(json.clusterId, 32, 'clusterId');
  } catch {
    throw corrupt(where, 'its identity has no valid cluster id');
  }
  if (typeof json.replica !== 'number' || !Number.isInteger(json.replica) || json.replica < 1) {
    throw corrupt(where, 'its identity has no valid replica index');
  }
  return { clusterId, replicaIndex: json.replica };
}

export function identityText(identity: StoreIdentity): string {
  const json: IdentityJson = {
    format: STORE_FORMAT,
    clusterId: toHex(identity.clusterId),
    replica: identity.replicaIndex,
  };
  return JSON.stringify(json);
}
