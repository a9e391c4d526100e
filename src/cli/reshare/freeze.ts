/**
 * `quorumfence reshare freeze`: an old replica signs nothing more. On a stopped replica (--data) it takes the
 * store's lock, freezes, and exports the record signed with the replica's share (--key, --cluster: the signed
 * frozen export `reshare inherit` takes); on a running one (--url) it asks POST /admin/freeze, over wss/https
 * trusting --ca besides the system's certificate authorities.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { resolve } from 'node:path';
import { QuorumFenceError } from '../../common/errors.js';
import { OPERATOR_SECRET_ENV, readOperatorSecret } from '../../common/operator-secret.js';
import { SigningRecord } from '../../replica/signing-record.js';
import { parseDuration, parseFlags, required } from '../../command/args.js';

/** How long a live freeze may take, the replica's flush included, when --timeout is not given. */
const DEFAULT_FREEZE_TIMEOUT_MS = 30_000;
import { readCertificateAuthority } from '../../command/pem.js';
import { bytesEqual } from '../../common/bytes.js';
import { existingRecordDir, frozenExportText, loadSigner, refuseOutFile, writeInterchangeText } from '../replica.js';

export async function freeze(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    out: { type: 'string' },
    reason: { type: 'string' },
    url: { type: 'string' },
    'secret-file': { type: 'string' },
    timeout: { type: 'string' },
    // Replaced by --timeout (a duration with its unit, as every other duration): named, so it is refused with a hint.
    'timeout-ms': { type: 'string' },
    ca: { type: 'string' },
    key: { type: 'string' },
    cluster: { type: 'string' },
  });
  if (values['timeout-ms'] !== undefined)
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `--timeout-ms is now --timeout, a duration with its unit like every other (--timeout ${values['timeout-ms']}ms)`,
    );
  if ((values.url === undefined) === (values.data === undefined))
    throw new QuorumFenceError('INVALID_OPTION', 'freeze: give --data (a stopped replica) or --url (a running one)');
  if (values.url !== undefined) {
    if (values.out !== undefined || values.key !== undefined || values.cluster !== undefined)
      throw new QuorumFenceError(
        'INVALID_OPTION',
        '--out, --key and --cluster go with --data; after a live freeze, export with ' +
          '"quorumfence replica export --data DIR --key KEY --cluster CLUSTER"',
      );
    return freezeLive({
      urlText: values.url,
      secretFile: values['secret-file'],
      reason: values.reason ?? 'reshare',
      timeoutText: values.timeout,
      caFile: values.ca,
    });
  }
  if (values.ca !== undefined)
    throw new QuorumFenceError('INVALID_OPTION', '--ca goes with --url (a running replica over wss:// or https://)');
  const dataDir = existingRecordDir(values.data);
  // The export is signed with the replica's share, so everything it needs is checked before anything is frozen.
  const signer = loadSigner(required(values.key, 'key'), required(values.cluster, 'cluster'));
  if (values.out !== undefined) refuseOutFile(values.out);
  const peek = SigningRecord.open(dataDir, undefined, { readOnly: true });
  const identity = peek.identity;
  await peek.close();
  if (!bytesEqual(identity.clusterId, signer.cluster.id) || identity.replicaIndex !== signer.key.index)
    throw new QuorumFenceError(
      'CLUSTER_MISMATCH',
      `${dataDir} is replica ${identity.replicaIndex}'s signing record` +
        (bytesEqual(identity.clusterId, signer.cluster.id) ? '' : ' of another cluster') +
        `, not that of --key (replica ${signer.key.index} of --cluster); nothing frozen`,
    );
  // A writable open takes the store's lock: a running replica makes this fail with STORE_LOCKED.
  const store = SigningRecord.open(dataDir, identity);
  let text: string;
  try {
    const state = await store.freeze(values.reason ?? 'reshare');
    process.stderr.write(`reshare: replica ${identity.replicaIndex} frozen at ${state.at}; it signs nothing more\n`);
    text = frozenExportText(store, signer);
  } finally {
    await store.close();
  }
  writeInterchangeText(text, values.out);
  return 0;
}

/** The admin url of a replica given by its endpoint (ws://, wss://) or its http(s) address. */
function adminFreezeUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new QuorumFenceError('INVALID_OPTION', `--url: not a URL: ${JSON.stringify(text.slice(0, 100))}`);
  }
  const scheme = { 'ws:': 'http:', 'wss:': 'https:', 'http:': 'http:', 'https:': 'https:' }[url.protocol];
  if (!scheme)
    throw new QuorumFenceError('INVALID_OPTION', `--url: expected ws, wss, http or https, got ${url.protocol}`);
  return new URL(`${scheme}//${url.host}/admin/freeze`);
}

/** One POST with a JSON body; the answer's status and parsed body (bounded: 64 KiB). */
function postJson(
  url: URL,
  headers: Record<string, string>,
  body: string,
  options: { timeoutMs: number; ca: Buffer | undefined },
): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolveAnswer, reject) => {
    const onAnswer = (response: IncomingMessage) => {
      const chunks: Buffer[] = [];
      let size = 0;
      response.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size <= 64 * 1024) chunks.push(chunk);
      });
      response.on('end', () => {
        clearTimeout(timer);
        let parsed: unknown;
        try {
          parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          parsed = {};
        }
        const object = typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : {};
        resolveAnswer({ status: response.statusCode ?? 0, body: object });
      });
      response.on('error', reject);
    };
    const common = {
      method: 'POST',
      headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
    };
    const req =
      url.protocol === 'https:'
        ? httpsRequest(url, { ...common, ...(options.ca ? { ca: options.ca } : {}) }, onAnswer)
        : httpRequest(url, common, onAnswer);
    // The whole exchange, not one idle gap: the answer comes only after the replica's flush.
    const timer = setTimeout(
      () => req.destroy(Object.assign(new Error('timed out'), { name: 'TimeoutError' })),
      options.timeoutMs,
    );
    req.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    req.end(body);
  });
}

/** POST /admin/freeze to a running replica; succeeds only once the replica has flushed its freeze marker. */
async function freezeLive(options: {
  urlText: string;
  secretFile: string | undefined;
  reason: string;
  timeoutText: string | undefined;
  caFile: string | undefined;
}): Promise<number> {
  const url = adminFreezeUrl(options.urlText);
  if (options.caFile !== undefined && url.protocol !== 'https:')
    throw new QuorumFenceError('INVALID_OPTION', `--ca goes with a wss:// or https:// --url, not ${url.protocol}`);
  const ca = options.caFile === undefined ? undefined : readCertificateAuthority(resolve(options.caFile), 'ca');
  const secret = readOperatorSecret(options.secretFile, 'secret-file');
  if (secret === undefined)
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `--secret-file (or $${OPERATOR_SECRET_ENV}) is required with --url: the replica's operator secret`,
    );
  const timeoutMs = parseDuration(options.timeoutText, 'timeout', DEFAULT_FREEZE_TIMEOUT_MS);
  if (timeoutMs < 1 || timeoutMs > 600_000)
    throw new QuorumFenceError('INVALID_OPTION', `--timeout expects 1ms .. 10m, got "${options.timeoutText}"`);
  let answer: { status: number; body: Record<string, unknown> };
  try {
    answer = await postJson(
      url,
      { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      JSON.stringify({ reason: options.reason }),
      { timeoutMs, ca },
    );
  } catch (error) {
    const timedOut = (error as Error).name === 'TimeoutError';
    throw new QuorumFenceError(
      timedOut ? 'TIMEOUT' : 'CONNECTION_FAILED',
      `${url.href}: ${
        timedOut
          ? `no answer within ${timeoutMs} ms; the freeze may or may not be recorded, ask again`
          : `${(error as Error).message}${url.protocol === 'https:' && !ca ? ' (a certificate this machine does not trust? give its CA with --ca FILE)' : ''}`
      }`,
    );
  }
  const { status, body } = answer;
  if (status !== 200) {
    const code = status === 401 ? 'UNAUTHENTICATED' : status === 500 ? 'INTERNAL' : 'INVALID_ARGUMENT';
    throw new QuorumFenceError(code, `${url.href} refused the freeze (HTTP ${status}): ${String(body.message)}`);
  }
  process.stderr.write(
    `reshare: replica ${String(body.replica)} frozen at ${String(body.at)} while running; it signs nothing more. ` +
      `Export its record with "quorumfence replica export --data DIR" (read-only, beside the running replica).\n`,
  );
  process.stdout.write(JSON.stringify(body) + '\n');
  return 0;
}
