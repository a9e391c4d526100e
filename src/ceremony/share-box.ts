/**
 * Shares encrypted to their recipient: X25519 between the dealer's fresh
 * ephemeral key (one per deal) and the recipient's encryption key, HKDF-SHA256
 * bound to the ceremony, dealer and recipient, then ChaCha20-Poly1305. Each
 * derived key encrypts one message, so a fixed nonce is safe. Whatever carries
 * the packets (and every other member) sees only ciphertext.
 */
import { chacha20poly1305 } from '@noble/ciphers/chacha.js';
import { x25519 } from '@noble/curves/ed25519.js';
import { hkdf } from '@noble/hashes/hkdf.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { concatBytes, u16be } from '../common/bytes.js';

const INFO = new TextEncoder().encode('quorumfence/dkg/share-box/v1');
const NONCE = new Uint8Array(12);
/** 32-byte scalar + 16-byte tag. */
export const SEALED_SHARE_BYTES = 48;

function boxKey(shared: Uint8Array, ceremonyId: Uint8Array, dealer: number, recipient: number): Uint8Array {
  return hkdf(sha256, shared, ceremonyId, concatBytes(INFO, u16be(dealer), u16be(recipient)), 32);
}

function associatedData(ceremonyId: Uint8Array, dealer: number, recipient: number): Uint8Array {
  return concatBytes(ceremonyId, u16be(dealer), u16be(recipient));
}

export interface EphemeralKey {
  readonly publicKey: Uint8Array;
  seal(
    recipientKey: Uint8Array,
    ceremonyId: Uint8Array,
    dealer: number,
    recipient: number,
    share: Uint8Array,
  ): Uint8Array;
}

/** A fresh ephemeral X25519 key for one deal; its secret lives only in this object. */
export function ephemeralKey(): EphemeralKey {
  const secret = x25519.utils.randomSecretKey();
  return {
    publicKey: x25519.getPublicKey(secret),
    seal(recipientKey, ceremonyId, dealer, recipient, share) {
      const key = boxKey(x25519.getSharedSecret(secret, recipientKey), ceremonyId, dealer, recipient);
      return chacha20poly1305(key, NONCE, associatedData(ceremonyId, dealer, recipient)).encrypt(share);
    },
  };
}

/**
 * Opens a sealed share with the recipient's X25519 function; null when it does
 * not authenticate (wrong key, tampered, or not for this dealer/recipient/ceremony).
 */
export function openShare(
  sharedSecret: (peer: Uint8Array) => Uint8Array,
  ephemeralPublicKey: Uint8Array,
  ceremonyId: Uint8Array,
  dealer: number,
  recipient: number,
  sealed: Uint8Array,
): Uint8Array | null {
  if (sealed.length !== SEALED_SHARE_BYTES || ephemeralPublicKey.length !== 32) return null;
  try {
    const key = boxKey(sharedSecret(ephemeralPublicKey), ceremonyId, dealer, recipient);
    return chacha20poly1305(key, NONCE, associatedData(ceremonyId, dealer, recipient)).decrypt(sealed);
  } catch {
    return null;
  }
}
