/**
 * Issue 30 (finding 8, the reference resource's part): a request refused before its token is accepted (no token,
 * a malformed or forged one, another cluster's, another resource's, a proof by the wrong key) costs no durable
 * write. Anyone can send those, and each used to append an fsync'd entry to the guard log. They are answered and
 * counted in the metrics; the store is not touched. What the log is for stays: accepted writes and conflicts are
 * durable as before. A real resource process over real HTTP, its real LMDB store.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256 } from '@noble/hashes/sha2.js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { toBase64Url } from '../../src/common/bytes.js';
import { bodyDigest, signRequest } from '../../src/guard/proof.js';
import { startResource, stopAllResources, type ResourceProcess } from '../support/resource-process.js';
import { makeHolder, makeTokenFactory } from '../support/token-factory.js';

const GARBAGE_REQUESTS = 200;
/** Sent this many at a time: enough to overlap, few enough not to queue behind the machine's other work. */
const AT_ONCE = 20;

const factory = makeTokenFactory();
const root = mkdtempSync(join(tmpdir(), 'qf-unauthenticated-'));
const clusterFile = factory.writeClusterFile(root);
const dataDir = join(root, 'data');
const resource = 'guarded';
const path = `/kv/${resource}/k`;
const first = makeHolder();
const rival = makeHolder();
let server: ResourceProcess;

beforeAll(async () => {
  server = await startResource({ clusterFile, dataDir });
});

afterAll(async () => {
  await stopAllResources();
  rmSync(root, { recursive: true, force: true });
});

async function put(
  token: string | undefined,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(server.url + path, {
    method: 'PUT',
    headers: { ...headers, ...(token === undefined ? {} : { authorization: `QuorumFence ${token}` }) },
    body,
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

async function log(): Promise<{ entries: Record<string, unknown>[]; lastSeq: number }> {
  const response = await fetch(`${server.url}/log?after=0&limit=1000`);
  return (await response.json()) as { entries: Record<string, unknown>[]; lastSeq: number };
}

/** The store's one data file, as bytes on disk: any committed transaction changes it (LMDB's meta page). */
const storeDigest = () =>
  createHash('sha256')
    .update(readFileSync(join(dataDir, 'data.mdb')))
    .digest('hex');

/** Requests that fail before their token is accepted, each with the status and code the resource answers. */
function garbage(k: number): {
  token: string | undefined;
  headers?: Record<string, string>;
  status: number;
  code: string;
} {
  const genuine = factory.issue({ resource, epoch: 7, holder: first });
  switch (k % 6) {
    case 0:
      return { token: undefined, status: 401, code: 'missing_token' };
    case 1:
      return { token: `A!!${k}`, status: 401, code: 'malformed' };
    case 2:
      return {
        token: toBase64Url(factory.issueWithSigners({ resource, epoch: 100 + k }, [1, 3]).bytes),
        status: 401,
        code: 'bad_token',
      };
    case 3:
      return { token: makeTokenFactory().issueText({ resource, epoch: 100 + k }), status: 401, code: 'wrong_cluster' };
    case 4:
      return {
        token: factory.issueText({ resource: `elsewhere-${k}`, epoch: 9 }),
        status: 403,
        code: 'wrong_resource',
      };
    default: {
      // A genuine token, with a proof signed by a key that is not its holder's.
      const proof = signRequest(makeHolder(), {
        audience: '',
        method: 'PUT',
        resource,
        key: 'k',
        bodyDigest: bodyDigest(new TextEncoder().encode('forged')),
        tokenDigest: sha256(genuine.bytes),
        counter: BigInt(k + 1),
      });
      return {
        token: toBase64Url(genuine.bytes),
        headers: { 'quorumfence-proof': `${k + 1}.${toBase64Url(proof.signature)}` },
        status: 401,
        code: 'bad_proof',
      };
    }
  }
}

describe('unauthenticated requests at the reference resource', () => {
  test(`${GARBAGE_REQUESTS} of them are answered with their refusal and counted, and write nothing: the log, its sequence and the store's file are unchanged`, async () => {
    expect((await put(factory.issueText({ resource, epoch: 5, holder: first }), 'genuine')).status).toBe(200);
    expect((await put(factory.issueText({ resource, epoch: 5, holder: rival }), 'rival')).json).toMatchObject({
      code: 'conflict',
    });
    const before = await log();
    expect(before.lastSeq).toBe(2);
    const digest = storeDigest();

    for (let start = 0; start < GARBAGE_REQUESTS; start += AT_ONCE) {
      const batch = Array.from({ length: AT_ONCE }, (_, k) => garbage(start + k));
      const answers = await Promise.all(batch.map((g) => put(g.token, 'forged', g.headers)));
      answers.forEach((answer, k) => {
        expect(answer.status, JSON.stringify(answer.json)).toBe(batch[k]!.status);
        // Nothing was logged, so there is no seq to name.
        expect(answer.json).toMatchObject({ ok: false, code: batch[k]!.code, seq: null });
      });
    }

    expect(await log()).toEqual(before);
    expect(storeDigest()).toBe(digest);
    const value = await fetch(server.url + path);
    expect(await value.text()).toBe('genuine');
    // Counted where an operator looks: one attempt per request, by its refusal.
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    let counted = 0;
    for (const code of ['missing_token', 'malformed', 'bad_token', 'wrong_cluster', 'wrong_resource', 'bad_proof']) {
      const line = new RegExp(`^quorumfence_guard_attempts_total\\{[^}]*outcome="${code}"[^}]*\\} (\\d+)$`, 'm');
      counted += Number(line.exec(metrics)?.[1] ?? 0);
    }
    expect(counted).toBe(GARBAGE_REQUESTS);
  });

  test('the accepted write and the conflict are still durable: after a SIGKILL and a restart, both are in the log', async () => {
    await server.stop('SIGKILL');
    server = await startResource({ clusterFile, dataDir });
    const { entries, lastSeq } = await log();
    expect(lastSeq).toBe(2);
    expect(entries.map((e) => [e.seq, e.outcome, e.epoch])).toEqual([
      [1, 'accepted', '5'],
      [2, 'conflict', '5'],
    ]);
    expect(await (await fetch(server.url + path)).text()).toBe('genuine');
  });
});
