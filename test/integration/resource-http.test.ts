/**
 * The reference resource as a real process over real HTTP: fencing, bad
 * tokens of every kind (each refused with its status and code, changing
 * nothing, not even the log), malformed input that never crashes it, metrics, the log,
 * graceful SIGTERM, and proof-of-possession mode.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256 } from '@noble/hashes/sha2.js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { toBase64Url } from '../../src/common/bytes.js';
import { bodyDigest, signRequest } from '../../src/guard/proof.js';
import { tokenToText, type AdmissionToken } from '../../src/token/admission-token.js';
import { startResource, stopAllResources, type ResourceProcess } from '../support/resource-process.js';
import { makeHolder, makeTokenFactory, type TestHolder } from '../support/token-factory.js';

const factory = makeTokenFactory();
const root = mkdtempSync(join(tmpdir(), 'qf-resource-'));
const clusterFile = factory.writeClusterFile(root);
let server: ResourceProcess;

beforeAll(async () => {
  server = await startResource({ clusterFile, dataDir: join(root, 'data') });
});

afterAll(async () => {
  await stopAllResources();
  rmSync(root, { recursive: true, force: true });
});

const kvPath = (resource: string, key: string) => `/kv/${encodeURIComponent(resource)}/${encodeURIComponent(key)}`;

async function call(
  method: string,
  path: string,
  options: { token?: string; body?: string | Uint8Array; headers?: Record<string, string>; base?: string } = {},
): Promise<{ status: number; json: Record<string, unknown>; text: string; headers: Headers }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.authorization = `QuorumFence ${options.token}`;
  const response = await fetch((options.base ?? server.url) + path, {
    method,
    headers,
    ...(options.body !== undefined ? { body: options.body } : {}),
  });
  const text = await response.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // A value, not JSON.
  }
  return { status: response.status, json, text, headers: response.headers };
}

async function lastLogEntry(base = server.url): Promise<Record<string, unknown>> {
  const { json } = await call('GET', '/log?after=0&limit=1', { base });
  const last = json.lastSeq as number;
  const page = await call('GET', `/log?after=${last - 1}&limit=1`, { base });
  return (page.json.entries as Record<string, unknown>[])[0]!;
}

describe('S4 fencing over HTTP', () => {
  test('PUT accepts and raises the barrier; a stale epoch gets 409 naming the barrier and changes nothing', async () => {
    const r = 'fence/basic';
    const put = await call('PUT', kvPath(r, 'k'), {
      token: factory.issueText({ resource: r, epoch: 10 }),
      body: 'ten',
    });
    expect(put.status).toBe(200);
    expect(put.json).toMatchObject({ ok: true, epoch: '10', barrier: '10', raised: true, version: expect.any(Number) });
    const stale = await call('PUT', kvPath(r, 'k'), {
      token: factory.issueText({ resource: r, epoch: 9 }),
      body: 'nine',
    });
    expect(stale.status).toBe(409);
    expect(stale.json).toMatchObject({ ok: false, code: 'stale', barrier: '10' });
    expect((await call('GET', kvPath(r, 'k'))).text).toBe('ten');
    expect((await call('GET', `/barrier/${encodeURIComponent(r)}`)).json).toMatchObject({ resource: r, epoch: '10' });
    expect(await lastLogEntry()).toMatchObject({
      outcome: 'stale',
      epoch: '9',
      barrierBefore: '10',
      resource: r,
      key: 'k',
      op: 'put',
    });
  });

  test('a different token at the barrier epoch gets 409 with code conflict, and the first value stays', async () => {
    const r = 'fence/conflict';
    expect(
      (
        await call('PUT', kvPath(r, 'k'), {
          token: tokenToText(factory.issue({ resource: r, epoch: 4, holder: makeHolder() })),
          body: 'first',
        })
      ).status,
    ).toBe(200);
    const second = await call('PUT', kvPath(r, 'k'), {
      token: tokenToText(factory.issue({ resource: r, epoch: 4, holder: makeHolder() })),
      body: 'second',
    });
    expect(second.status).toBe(409);
    expect(second.json).toMatchObject({ code: 'conflict', barrier: '4' });
    expect((await call('GET', kvPath(r, 'k'))).text).toBe('first');
    expect((await call('GET', '/metrics')).text).toMatch(
      /quorumfence_guard_conflicts_total\{resource="fence\/conflict",cluster="[0-9a-f]+"\} 1/,
    );
  });

  test("a fenced GET refuses a stale holder and a new holder's GET fences out the old writer", async () => {
    const r = 'fence/reads';
    const old = factory.issueText({ resource: r, epoch: 1 });
    expect((await call('PUT', kvPath(r, 'k'), { token: old, body: 'v1' })).status).toBe(200);
    const read = await call('GET', kvPath(r, 'k'), { token: factory.issueText({ resource: r, epoch: 2 }) });
    expect(read.status).toBe(200);
    expect(read.text).toBe('v1');
    expect(read.headers.get('quorumfence-barrier')).toBe('2');
    const late = await call('PUT', kvPath(r, 'k'), { token: old, body: 'computed from an old world' });
    expect(late.status).toBe(409);
    expect((await call('GET', kvPath(r, 'k'), { token: old })).status).toBe(409);
    expect((await call('GET', kvPath(r, 'k'))).text).toBe('v1');
  });

  test('DELETE is fenced; GET of an absent key is 404', async () => {
    const r = 'fence/delete';
    const token = factory.issueText({ resource: r, epoch: 3 });
    await call('PUT', kvPath(r, 'k'), { token, body: 'x' });
    expect((await call('DELETE', kvPath(r, 'k'), { token: factory.issueText({ resource: r, epoch: 2 }) })).status).toBe(
      409,
    );
    const del = await call('DELETE', kvPath(r, 'k'), { token });
    expect(del.status).toBe(200);
    expect(del.json).toMatchObject({ ok: true, deleted: true });
    expect((await call('GET', kvPath(r, 'k'))).status).toBe(404);
  });

  test('If-Version: compare-and-set on top of the fence (412 when the version moved)', async () => {
    const r = 'fence/cas';
    const token = factory.issueText({ resource: r, epoch: 1 });
    const created = await call('PUT', kvPath(r, 'k'), { token, body: 'a', headers: { 'quorumfence-if-version': '0' } });
    expect(created.status).toBe(200);
    const version = String(created.json.version);
    expect(
      (await call('PUT', kvPath(r, 'k'), { token, body: 'b', headers: { 'quorumfence-if-version': '0' } })).status,
    ).toBe(412);
    const ok = await call('PUT', kvPath(r, 'k'), { token, body: 'c', headers: { 'quorumfence-if-version': version } });
    expect(ok.status).toBe(200);
    const failed = await call('PUT', kvPath(r, 'k'), {
      token,
      body: 'd',
      headers: { 'quorumfence-if-version': version },
    });
    expect(failed.status).toBe(412);
    expect(failed.json).toMatchObject({ code: 'version_mismatch' });
    expect((await call('GET', kvPath(r, 'k'))).text).toBe('c');
  });

  test('resource names with slashes and non-ASCII travel URL-encoded', async () => {
    const r = 'orders/eu-west/ünïcødé';
    expect(
      (await call('PUT', kvPath(r, 'a/b'), { token: factory.issueText({ resource: r, epoch: 1 }), body: 'v' })).status,
    ).toBe(200);
    expect((await call('GET', kvPath(r, 'a/b'))).text).toBe('v');
  });
});

describe('S5 unforgeability at the resource: bad tokens are refused with their status and code, and change nothing', () => {
  const r = 'tokens';
  let genuine: AdmissionToken;

  beforeAll(async () => {
    genuine = factory.issue({ resource: r, epoch: 5 });
    expect((await call('PUT', kvPath(r, 'k'), { token: tokenToText(genuine), body: 'genuine' })).status).toBe(200);
  });

  async function refused(token: string | undefined, status: number, code: string, errorCode?: string): Promise<void> {
    const before = (await call('GET', '/log?limit=1')).json.lastSeq as number;
    const response = await call('PUT', kvPath(r, 'k'), { ...(token !== undefined ? { token } : {}), body: 'forged' });
    expect(response.status, `${code} ${response.text}`).toBe(status);
    // Refused before its token was accepted: not logged, so no seq (docs/security.md, "The guard log").
    expect(response.json).toMatchObject({ ok: false, code, seq: null, ...(errorCode ? { errorCode } : {}) });
    expect((await call('GET', kvPath(r, 'k'))).text).toBe('genuine');
    expect((await call('GET', `/barrier/${r}`)).json).toMatchObject({ epoch: '5' });
    expect((await call('GET', '/log?limit=1')).json.lastSeq).toBe(before);
  }

  const flip = (bytes: Uint8Array, index: number, bit = 0): string => {
    const copy = bytes.slice();
    copy[index]! ^= 1 << bit;
    return toBase64Url(copy);
  };

  test('missing token: 401 missing_token', async () => {
    await refused(undefined, 401, 'missing_token');
  });

  test('forged: signed by fewer than t replicas, 401 bad_token', async () => {
    await refused(tokenToText(factory.issueWithSigners({ resource: r, epoch: 6 }, [1, 3])), 401, 'bad_token');
  });

  test('forged: a higher epoch pasted into a genuine token, 401 bad_token', async () => {
    await refused(flip(genuine.bytes, 39, 7), 401, 'bad_token');
  });

  test('tampered: a bit flipped in each field', async () => {
    const holderAt = 1 + 32 + 8 + 2 + r.length;
    const signatureAt = holderAt + 32;
    await refused(flip(genuine.bytes, 0), 401, 'malformed', 'UNKNOWN_VERSION');
    await refused(flip(genuine.bytes, 5), 401, 'wrong_cluster');
    await refused(flip(genuine.bytes, 40), 401, 'bad_token');
    await refused(flip(genuine.bytes, 1 + 32 + 8 + 2), 401, 'bad_token'); // resource "tokens" → "uokens"
    await refused(flip(genuine.bytes, holderAt + 3), 401, 'bad_token');
    await refused(flip(genuine.bytes, signatureAt, 7), 401, 'malformed', 'POINT_NOT_CANONICAL'); // the compression flag
    await refused(flip(genuine.bytes, signatureAt, 5), 401, 'bad_token'); // the sign flag: the negated point, a valid point that does not verify
    // A flip deep in the signature lands off the curve or on another point; either way it is refused.
    const deep = await call('PUT', kvPath(r, 'k'), { token: flip(genuine.bytes, signatureAt + 50), body: 'forged' });
    expect(deep.status).toBe(401);
    expect(['malformed', 'bad_token']).toContain(deep.json.code);
    expect((await call('GET', kvPath(r, 'k'))).text).toBe('genuine');
  });

  test('wrong cluster: a genuine token of another cluster, 401 wrong_cluster', async () => {
    await refused(makeTokenFactory().issueText({ resource: r, epoch: 6 }), 401, 'wrong_cluster');
  });

  test('wrong resource: a genuine token for another resource, 403 wrong_resource', async () => {
    await refused(factory.issueText({ resource: 'tokens-2', epoch: 6 }), 403, 'wrong_resource');
  });

  test('truncated: bytes cut off, 401 malformed BAD_LENGTH; text cut off, 401 malformed', async () => {
    await refused(toBase64Url(genuine.bytes.subarray(0, genuine.bytes.length - 1)), 401, 'malformed', 'BAD_LENGTH');
    await refused(toBase64Url(genuine.bytes.subarray(0, 40)), 401, 'malformed', 'BAD_LENGTH');
    const text = tokenToText(genuine);
    // Cut to a length no base64url text can have (4k + 1), so the code does not depend on the token's last bits.
    await refused(text.slice(0, text.length - ((text.length % 4) + 3)), 401, 'malformed', 'BAD_ENCODING');
    await refused('%%%', 401, 'malformed', 'BAD_ENCODING');
  });
});

describe('malformed input never crashes the resource', () => {
  test('bad paths, headers and bodies get 4xx answers and the process stays healthy', async () => {
    const token = factory.issueText({ resource: 'input', epoch: 1 });
    const cases: [string, string, Parameters<typeof call>[2], number][] = [
      ['GET', '/kv/%E0%A4%A/k', {}, 400],
      ['GET', '/kv/' + 'x'.repeat(257) + '/k', {}, 400],
      ['GET', '/kv/%ED%A0%80/k', {}, 400], // a lone surrogate, percent-encoded
      ['PUT', '/kv/input/' + 'k'.repeat(513), { token, body: 'x' }, 400],
      ['GET', '/kv//k', {}, 400],
      ['GET', '/kv/input', {}, 404],
      ['GET', '/nothing', {}, 404],
      ['POST', '/kv/input/k', { token, body: 'x' }, 405],
      ['PATCH', '/healthz', {}, 405],
      ['PUT', '/kv/input/k', { token, body: 'x', headers: { 'quorumfence-if-version': 'seven' } }, 400],
      ['PUT', '/kv/input/k', { token, body: 'x', headers: { 'quorumfence-proof': 'nonsense' } }, 400],
      ['PUT', '/kv/input/k', { token, body: 'x', headers: { 'quorumfence-proof': `0.${'A'.repeat(86)}` } }, 400],
      ['GET', '/log?after=-1', {}, 400],
      ['GET', '/log?limit=0', {}, 400],
      ['PUT', '/kv/input/k', { token, body: new Uint8Array((1 << 20) + 1) }, 413],
      ['PUT', '/kv/input/k', { body: 'x', headers: { authorization: 'Bearer something' } }, 401],
    ];
    for (const [method, path, options, status] of cases) {
      const response = await call(method, path, options);
      expect(response.status, `${method} ${path.slice(0, 40)}: ${response.text.slice(0, 200)}`).toBe(status);
    }
    // Not even HTTP.
    await new Promise<void>((resolve, reject) => {
      const { port } = new URL(server.url);
      const socket = connect(Number(port), '127.0.0.1', () => socket.end('\x00\x01garbage\r\n\r\n'));
      socket.on('data', () => undefined);
      socket.on('close', () => resolve());
      socket.on('error', reject);
    });
    expect((await call('GET', '/healthz')).status).toBe(200);
    expect(server.running).toBe(true);
    expect((await call('GET', kvPath('input', 'k'))).status).toBe(404);
  });
});

describe('observability', () => {
  test('/metrics counts attempts by outcome, token cache lookups and verify latency', async () => {
    const r = 'metrics';
    const token = factory.issueText({ resource: r, epoch: 1 });
    for (let i = 0; i < 3; i++) await call('PUT', kvPath(r, 'k'), { token, body: String(i) });
    const { text } = await call('GET', '/metrics');
    expect(text).toMatch(/quorumfence_guard_attempts_total\{op="put",outcome="accepted",cluster="[0-9a-f]+"\} \d+/);
    expect(text).toMatch(/quorumfence_guard_attempts_total\{op="put",outcome="stale",cluster="[0-9a-f]+"\} \d+/);
    expect(text).toMatch(/quorumfence_guard_token_cache_lookups_total\{result="hit",cluster="[0-9a-f]+"\} \d+/);
    expect(text).toMatch(/quorumfence_guard_verify_seconds_count\{cluster="[0-9a-f]+"\} \d+/);
  });

  test('/metrics counts the batches of pairing checks and the checks they answered', async () => {
    const counter = (text: string, name: string) => {
      const found = new RegExp(`^${name}\\{cluster="[0-9a-f]+"\\} (\\d+)$`, 'm').exec(text);
      expect(found, name).not.toBeNull();
      return Number(found![1]);
    };
    const read = async () => {
      const { text } = await call('GET', '/metrics');
      return {
        batches: counter(text, 'quorumfence_guard_verify_batches_total'),
        checks: counter(text, 'quorumfence_guard_verify_batched_checks_total'),
      };
    };
    const before = await read();
    // Six writers, each with a token the guard has not seen: six pairing checks, in one batch or several.
    const statuses = await Promise.all(
      Array.from({ length: 6 }, (_, k) =>
        call('PUT', kvPath(`batches/${k}`, 'k'), {
          token: factory.issueText({ resource: `batches/${k}`, epoch: 1 }),
          body: 'x',
        }).then((r) => r.status),
      ),
    );
    expect(statuses).toEqual(Array.from({ length: 6 }, () => 200));
    const after = await read();
    expect(after.checks - before.checks).toBe(6);
    expect(after.batches - before.batches).toBeGreaterThanOrEqual(1);
    expect(after.batches - before.batches).toBeLessThanOrEqual(6);
  });

  test('/log pages the guard log in order', async () => {
    const first = await call('GET', '/log?after=0&limit=5');
    expect((first.json.entries as { seq: number }[]).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    const next = await call('GET', '/log?after=5&limit=2');
    expect((next.json.entries as { seq: number }[]).map((e) => e.seq)).toEqual([6, 7]);
  });
});

describe('lifecycle', () => {
  test('SIGTERM stops it gracefully (exit 0) and a restart finds data and barriers', async () => {
    const dataDir = join(root, 'lifecycle');
    const first = await startResource({ clusterFile, dataDir });
    const r = 'lifecycle';
    expect(
      (
        await call('PUT', kvPath(r, 'k'), {
          token: factory.issueText({ resource: r, epoch: 8 }),
          body: 'kept',
          base: first.url,
        })
      ).status,
    ).toBe(200);
    expect(await first.stop('SIGTERM')).toBe(0);
    expect(first.lines.some((l) => l.msg === 'stopped')).toBe(true);
    const second = await startResource({ clusterFile, dataDir });
    expect((await call('GET', kvPath(r, 'k'), { base: second.url })).text).toBe('kept');
    expect(
      (
        await call('PUT', kvPath(r, 'k'), {
          token: factory.issueText({ resource: r, epoch: 7 }),
          body: 'x',
          base: second.url,
        })
      ).status,
    ).toBe(409);
    expect(await second.stop('SIGTERM')).toBe(0);
  });
});

describe('proof-of-possession mode (--require-proof)', () => {
  const holder: TestHolder = makeHolder();
  let pop: ResourceProcess;
  let token: AdmissionToken;
  const r = 'pop';

  beforeAll(async () => {
    pop = await startResource({
      clusterFile,
      dataDir: join(root, 'pop'),
      args: ['--require-proof', '--audience', 'kv-pop'],
    });
    token = factory.issue({ resource: r, epoch: 2, holder });
  });

  function proofHeader(signer: TestHolder, counter: bigint, body: string, method = 'PUT', key = 'k'): string {
    const proof = signRequest(signer, {
      audience: 'kv-pop',
      method,
      resource: r,
      key,
      bodyDigest: bodyDigest(new TextEncoder().encode(body)),
      tokenDigest: sha256(token.bytes),
      counter,
    });
    return `${counter}.${toBase64Url(proof.signature)}`;
  }

  const signedPut = (signer: TestHolder, counter: bigint, body: string) =>
    call('PUT', kvPath(r, 'k'), {
      token: tokenToText(token),
      body,
      headers: { 'quorumfence-proof': proofHeader(signer, counter, body) },
      base: pop.url,
    });

  test('a request signed by the holder is accepted; the bare token is refused', async () => {
    expect((await signedPut(holder, 1n, 'one')).status).toBe(200);
    const bare = await call('PUT', kvPath(r, 'k'), { token: tokenToText(token), body: 'stolen', base: pop.url });
    expect(bare.status).toBe(401);
    expect(bare.json).toMatchObject({ code: 'proof_required' });
  });

  test('a replayed request is refused with 401 replayed and changes nothing', async () => {
    expect((await signedPut(holder, 2n, 'two')).status).toBe(200);
    const replay = await signedPut(holder, 2n, 'two');
    expect(replay.status).toBe(401);
    expect(replay.json).toMatchObject({ code: 'replayed' });
    expect((await call('GET', kvPath(r, 'k'), { base: pop.url })).text).toBe('two');
  });

  test("the token presented with a different key's signature is refused with 401 bad_proof", async () => {
    const stolen = await signedPut(makeHolder(), 3n, 'thief');
    expect(stolen.status).toBe(401);
    expect(stolen.json).toMatchObject({ code: 'bad_proof' });
    expect((await call('GET', kvPath(r, 'k'), { base: pop.url })).text).toBe('two');
  });

  test('a signature over another body is refused (the server digests the body it received)', async () => {
    const response = await call('PUT', kvPath(r, 'k'), {
      token: tokenToText(token),
      body: 'swapped body',
      headers: { 'quorumfence-proof': proofHeader(holder, 4n, 'signed body') },
      base: pop.url,
    });
    expect(response.status).toBe(401);
    expect(response.json).toMatchObject({ code: 'bad_proof' });
  });
});
