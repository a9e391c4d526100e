/**
 * A throwaway self-signed TLS certificate for tests that serve wss:// and
 * https:// on 127.0.0.1: an EC P-256 key and a one-day certificate whose
 * subjectAltName is IP:127.0.0.1, made by the openssl command. Tests skip
 * (with a warning) rather than fail where openssl is missing, since TLS
 * itself is Node's and not what they test.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

export interface SelfSignedCert {
  readonly certFile: string;
  readonly keyFile: string;
}

/**
 * Creates `dir` and writes cert.pem and key.pem into it. Returns undefined
 * (after a console warning naming openssl's error) when openssl fails, so
 * the caller can skip its test.
 */
export function makeSelfSignedCert(dir: string): SelfSignedCert | undefined {
  mkdirSync(dir);
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  const made = spawnSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      keyFile,
      '-out',
      certFile,
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    { encoding: 'utf8' },
  );
  if (made.status !== 0) {
    console.warn(`skipping the TLS test: openssl failed: ${made.stderr ?? made.error}`);
    return undefined;
  }
  return { certFile, keyFile };
}
