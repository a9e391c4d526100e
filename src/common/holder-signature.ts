/**
 * Checks a holder's Ed25519 signature: the replica's check of a connection's
 * `hello`, and the guard's check of a request's proof of possession. One rule
 * for both places: the key must be usable (common/holder-key.ts refuses
 * small-order and non-canonical keys first), then RFC 8032 verification by
 * node's native Ed25519.
 *
 * Why native: the pure-JavaScript verification costs about 1 ms of a
 * replica's event loop per connection on the bench machine, the native one
 * under 0.1 ms with the key's import (`bench replica`, "connections
 * authenticated at once"). A replica that restarts is met by every client
 * reconnecting at the same moment; at 1 ms each, ten thousand clients would
 * hold its event loop for ten seconds.
 *
 * Node-only (node:crypto); the client SDK, which also runs in browsers, only signs.
 */
import { createPublicKey, verify as verifySignature, type KeyObject } from 'node:crypto';
import { BoundedMap } from './bounded-map.js';
import { concatBytes } from './bytes.js';
import { isUsableHolderKey } from './holder-key.js';

export const HOLDER_SIGNATURE_BYTES = 64;

// SubjectPublicKeyInfo header for a raw Ed25519 key (RFC 8410): node's crypto takes keys only wrapped.
const ED25519_SPKI_PREFIX = Uint8Array.from([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]);

/** Imported keys, bounded: an import costs about as much as a verification, and clients reconnect with the same key. */
const KEY_CACHE_LIMIT = 1024;
const importedKeys = new BoundedMap<string, KeyObject>(KEY_CACHE_LIMIT);

function keyObject(holder: Uint8Array): KeyObject | undefined {
  const id = Buffer.from(holder).toString('hex');
  let key = importedKeys.get(id);
  if (!key) {
    // A small-order key verifies forged signatures (see holder-key.ts); a non-canonical one is no honest key.
    if (!isUsableHolderKey(holder)) return undefined;
    try {
      key = createPublicKey({
        key: Buffer.from(concatBytes(ED25519_SPKI_PREFIX, holder)),
        format: 'der',
        type: 'spki',
      });
    } catch {
      return undefined; // not a point on the curve: no signature can verify under it
    }
    importedKeys.set(id, key);
  }
  return key;
}

/**
 * True when `signature` is `holder`'s Ed25519 signature over `message` and
 * `holder` is a usable key. Never throws: bytes of any kind or length only
 * make it false.
 */
export function verifyHolderSignature(holder: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  if (!(holder instanceof Uint8Array) || !(signature instanceof Uint8Array) || !(message instanceof Uint8Array))
    return false;
  if (holder.length !== 32 || signature.length !== HOLDER_SIGNATURE_BYTES) return false;
  const key = keyObject(holder);
  if (!key) return false;
  try {
    return verifySignature(null, message, key, signature);
  } catch {
    return false;
  }
}
