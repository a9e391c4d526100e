/**
 * Issue 16, finding 2: `GET /log` on the reference resource handed every
 * accepted token (a bearer credential without --require-proof) to anyone.
 * Now the log shows digests to everyone and the tokens (accepted tokens and
 * the equal-epoch conflict evidence) only to a request carrying the
 * operator secret; a resource started without one never serves them.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { localOperatorSecret } from '../../src/common/operator-secret.js';
import { startLocalResource } from '../../src/cluster/launcher.js';
import type { LocalProcess } from '../../src/cluster/local-process.js';
import { tokenDigest, tokenToText } from '../../src/token/admission-token.js';
import { runCli } from '../support/cli.js';
import { makeHolder, makeTokenFactory } from '../support/token-factory.js';

const factory = makeTokenFactory();
const other = makeHolder();
let root: string;
let clusterFile: string;
let resource: LocalProcess;

async function put(base: string, name: string, token: string): Promise<number> {
  const response = await fetch(`${base}/kv/${encodeURIComponent(name)}/k`, {
    method: 'PUT',
    headers: { authorization: `QuorumFence ${token}` },
    body: 'v',
  });
  await response.text();
  return response.status;
}

async function readLog(base: string, authorization?: string): Promise<{ text: string; json: Record<string, unknown> }> {
  const response = await fetch(`${base}/log?after=0&limit=1000`, {
    headers: authorization === undefined ? {} : { authorization },
  });
  const text = await response.text();
  return { text, json: JSON.parse(text) as Record<string, unknown> };
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'qf-finding2-'));
  clusterFile = factory.writeClusterFile(root);
  resource = await startLocalResource({ clusterFile, dataDir: join(root, 'data') });
});

afterAll(async () => {
  await resource?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe('finding 2: GET /log does not hand out bearer tokens', () => {
  const accepted = factory.issue({ resource: 'finding2', epoch: 4 });
  const rival = factory.issue({ resource: 'finding2', epoch: 4, holder: other });

  test('anyone sees digests, epochs and outcomes; only the operator sees tokens and the conflict evidence', async () => {
    expect(await put(resource.url, 'finding2', tokenToText(accepted))).toBe(200);
    expect(await put(resource.url, 'finding2', tokenToText(rival))).toBe(409);

    for (const authorization of [
      undefined,
      'Bearer wrong-secret-of-enough-length-xx',
      `QuorumFence ${tokenToText(accepted)}`,
    ]) {
      const { text, json } = await readLog(resource.url, authorization);
      expect(json.tokens).toBe('withheld');
      expect(text).not.toContain(tokenToText(accepted));
      expect(text).not.toContain(tokenToText(rival));
      const entries = json.entries as Record<string, unknown>[];
      expect(entries).toMatchObject([
        { outcome: 'accepted', epoch: '4', tokenDigest: toHex(tokenDigest(accepted)), token: null },
        {
          outcome: 'conflict',
          epoch: '4',
          tokenDigest: toHex(tokenDigest(rival)),
          token: null,
          conflictingToken: null,
        },
      ]);
    }

    const operator = await readLog(resource.url, `Bearer ${localOperatorSecret()}`);
    expect(operator.json.tokens).toBe('included');
    expect(operator.json.entries).toMatchObject([
      { outcome: 'accepted', token: tokenToText(accepted) },
      { outcome: 'conflict', token: tokenToText(rival), conflictingToken: tokenToText(accepted) },
    ]);
  });

  test('a resource started without an operator secret never serves tokens', async () => {
    const bare = await startLocalResource({
      clusterFile,
      dataDir: join(root, 'bare'),
      env: { QUORUMFENCE_OPERATOR_SECRET: '' },
    });
    try {
      expect(await put(bare.url, 'finding2', tokenToText(accepted))).toBe(200);
      const { text, json } = await readLog(bare.url, `Bearer ${localOperatorSecret()}`);
      expect(json.tokens).toBe('withheld');
      expect(text).not.toContain(tokenToText(accepted));
    } finally {
      await bare.stop();
    }
  });

  test('--operator-secret-file refuses a short secret with INVALID_OPTION (exit 2)', async () => {
    const file = join(root, 'short.secret');
    writeFileSync(file, 'short\n');
    const result = await runCli([
      'resource',
      '--cluster',
      clusterFile,
      '--data',
      join(root, 'short'),
      '--operator-secret-file',
      file,
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('INVALID_OPTION');
  });
});
