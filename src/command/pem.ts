/**
 * PEM files named on the command line: a replica's TLS certificate and key, and the certificate
 * authority an operator's command trusts when it connects to a replica over wss:// or https://.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { QuorumFenceError } from '../common/errors.js';

/**
 * The bytes of a PEM file.
 * @throws QuorumFenceError IO_ERROR when it cannot be read
 */
export function readPem(path: string, flag: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new QuorumFenceError('IO_ERROR', `--${flag}: cannot read ${path}: ${(error as Error).message}`, { path });
  }
}

/**
 * A CA file to trust besides the system's: one or more PEM certificates, each checked to parse, so a wrong
 * file is named at once rather than failing later as a TLS handshake error.
 * @throws QuorumFenceError IO_ERROR (unreadable), INVALID_OPTION (no certificate in it, or one that does not parse)
 */
export function readCertificateAuthority(path: string, flag: string): Buffer {
  const pem = readPem(path, flag);
  const blocks = pem.toString('utf8').match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0)
    throw new QuorumFenceError('INVALID_OPTION', `--${flag}: ${path} holds no PEM certificate`, { path });
  for (const block of blocks) {
    try {
      new X509Certificate(block);
    } catch (error) {
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--${flag}: ${path} holds a certificate that does not parse: ${(error as Error).message}`,
        { path },
      );
    }
  }
  return pem;
}
