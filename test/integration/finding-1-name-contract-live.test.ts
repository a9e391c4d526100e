/**
 * Issue 16, finding 1, end to end: the name contract (no U+0000..U+001F, no
 * U+007F in resource names and guard keys) holds at every process a name
 * reaches: the client SDK refuses before sending, the replica answers
 * `invalid` and records nothing, and the reference resource answers 400.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { generateIdentity } from '../../src/client/identity.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import {
  dealLocalCluster,
  startLocalCluster,
  startLocalResource,
  type LocalCluster,
} from '../../src/cluster/launcher.js';
import type { LocalProcess } from '../../src/cluster/local-process.js';
import { outcomeOf, RawClient } from '../support/raw-client.js';

const BAD_NAMES = ['orders\u0000x', '\u0000'.repeat(32), '\u0004\u0000'.repeat(32), 'tab\there', 'del\u007f'];

let root: string;
let local: LocalCluster;
let resource: LocalProcess;

const exportRecord = (index: number): string =>
  execFileSync(
    process.execPath,
    [join(process.cwd(), 'dist/nodes/quorumfence.js'), 'replica', 'export', '--data', local.replica(index).dataDir],
    { encoding: 'utf8' },
  );

async function requestsCounted(): Promise<number> {
  const text = await (await fetch(local.replica(1).url.replace(/^ws/, 'http') + '/metrics')).text();
  let total = 0;
  for (const match of text.matchAll(/^quorumfence_replica_requests_total\{[^}]*\} (\d+)/gm)) total += Number(match[1]);
  return total;
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'qf-finding1-live-'));
  dealLocalCluster(join(root, 'keys'));
  local = await startLocalCluster({ newStores: true, dir: join(root, 'keys'), dataRoot: join(root, 'data') });
  resource = await startLocalResource({
    clusterFile: join(root, 'keys', 'cluster.json'),
    dataDir: join(root, 'resource'),
  });
});

afterAll(async () => {
  await resource?.stop();
  await local?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('finding 1: cross-resource aliasing in the LMDB guard (the name contract at every process)', () => {
  test('the client SDK refuses a name with a control character before sending anything', async () => {
    const client = await QuorumFenceClient.connect(local.cluster, generateIdentity());
    try {
      const before = await requestsCounted();
      for (const name of BAD_NAMES) {
        await expect(client.acquire(name, { ttlMs: 1000 })).rejects.toMatchObject({ code: 'NAME_CONTROL_CHARACTER' });
        await expect(client.status(name)).rejects.toMatchObject({ code: 'NAME_CONTROL_CHARACTER' });
      }
      expect(await requestsCounted()).toBe(before);
    } finally {
      await client.close();
    }
  });

  test('the replica answers invalid, naming the rule, and records nothing', async () => {
    const before = exportRecord(1);
    const client = await RawClient.open(local.replica(1).url);
    try {
      for (const name of BAD_NAMES) {
        const outcome = outcomeOf(await client.acquire(name, 1n));
        expect(outcome).toMatchObject({ status: 'invalid' });
        expect(JSON.stringify(outcome)).toContain('control characters');
      }
    } finally {
      await client.close();
    }
    expect(exportRecord(1)).toBe(before);
  });

  test('the reference resource answers 400 for a resource or key with a control character', async () => {
    for (const path of ['/kv/orders%00x/k', '/kv/orders/k%01', '/kv/orders/%7F', '/barrier/a%00b']) {
      const response = await fetch(resource.url + path, {
        method: path.startsWith('/kv') ? 'PUT' : 'GET',
        body: path.startsWith('/kv') ? 'v' : undefined,
      });
      const text = await response.text();
      expect(response.status, `${path}: ${text}`).toBe(400);
      expect(text).toContain('NAME_CONTROL_CHARACTER');
    }
    const log = (await (await fetch(resource.url + '/log')).json()) as { lastSeq: number };
    expect(log.lastSeq).toBe(0);
  });
});
