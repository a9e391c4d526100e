/**
 * `quorumfence keygen` and `quorumfence verify` as a user runs them: real
 * processes, real files, their exit codes and one-line errors.
 */
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadClusterFile } from '../../src/cluster/description.js';
import { loadReplicaKeyFile } from '../../src/cluster/replica-key.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { encodeToken, tokenToText } from '../../src/token/admission-token.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';
import { runCli } from '../support/cli.js';

let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'qf-keygen-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('quorumfence keygen', () => {
  it('writes a cluster description and 0600 key files that load and sign', async () => {
    const out = join(dir, 'c7');
    const result = await runCli(['keygen', '--replicas', '7', '--out', out, '--base-port', '9100']);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/n = 7, f = 2, t = 5/);
    const cluster = loadClusterFile(join(out, 'cluster.json'));
    expect(cluster.replicas.map((r) => r.endpoint)).toEqual(
      Array.from({ length: 7 }, (_, k) => `ws://127.0.0.1:${9100 + k}`),
    );
    const keys = cluster.replicas.map((r) => {
      const path = join(out, `replica-${r.index}.key`);
      expect(statSync(path).mode & 0o777).toBe(0o600);
      return loadReplicaKeyFile(path, cluster);
    });
    // The keys it wrote make a valid token together.
    const grant = makeGrant({
      clusterId: cluster.id,
      resource: 'jobs/nightly',
      epoch: 1n,
      holder: new Uint8Array(32).fill(1),
    });
    const partials = keys
      .slice(2)
      .map((k) => ({ index: k.index, signature: cluster.backend.sign(k.secretKey, grantMessage(grant)) }));
    const token = encodeToken(grant, combinePartials(cluster.backend, 7, partials)!);
    const verify = await runCli(['verify', tokenToText(token), '--cluster', join(out, 'cluster.json'), '--json']);
    expect(verify.code).toBe(0);
    expect(JSON.parse(verify.stdout)).toMatchObject({ valid: true, resource: 'jobs/nightly', epoch: '1' });
    // Text output and stdin input.
    const fromStdin = await runCli(['verify', '-', '--cluster', join(out, 'cluster.json')], {
      input: tokenToText(token) + '\n',
    });
    expect(fromStdin.code).toBe(0);
    expect(fromStdin.stdout).toMatch(/^valid token/);
  });

  it('uses the given endpoints', async () => {
    const out = join(dir, 'endpoints');
    const endpoints = [
      'wss://a.internal:7000',
      'wss://b.internal:7000',
      'wss://c.internal:7000',
      'wss://d.internal:7000',
    ];
    expect((await runCli(['keygen', '--replicas', '4', '--out', out, '--endpoints', endpoints.join(',')])).code).toBe(
      0,
    );
    expect(loadClusterFile(join(out, 'cluster.json')).replicas.map((r) => r.endpoint)).toEqual(endpoints);
  });

  it('refuses to overwrite existing key files', async () => {
    const out = join(dir, 'twice');
    expect((await runCli(['keygen', '--replicas', '4', '--out', out])).code).toBe(0);
    const before = readFileSync(join(out, 'replica-1.key'), 'utf8');
    const again = await runCli(['keygen', '--replicas', '4', '--out', out]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already exists.*\(FILE_EXISTS\)/);
    expect(readFileSync(join(out, 'replica-1.key'), 'utf8')).toBe(before);
    // --if-missing makes a complete key set a no-op, and still refuses a partial one.
    const idempotent = await runCli(['keygen', '--replicas', '4', '--out', out, '--if-missing']);
    expect(idempotent).toMatchObject({ code: 0, stdout: expect.stringMatching(/nothing to do/) });
    expect(readFileSync(join(out, 'replica-1.key'), 'utf8')).toBe(before);
    rmSync(join(out, 'replica-4.key'));
    expect((await runCli(['keygen', '--replicas', '4', '--out', out, '--if-missing'])).code).toBe(1);
  });

  it('refuses bad flags with one line that says what to do', async () => {
    for (const args of [
      ['keygen', '--replicas', '5', '--out', join(dir, 'x')],
      ['keygen', '--replicas', '4'],
      ['keygen', '--replicas', '4', '--out', join(dir, 'y'), '--endpoints', 'http://a,b'],
      ['keygen', '--replicas', '4', '--out', join(dir, 'z'), '--colour', 'blue'],
    ]) {
      const result = await runCli(args);
      expect(result.code).toBe(2);
      expect(result.stderr.trim().split('\n')).toHaveLength(1);
      expect(result.stderr).toMatch(/; run "quorumfence keygen --help" \(INVALID_OPTION\)\n$/);
    }
  });
});

describe('quorumfence verify', () => {
  it('reports tampered, foreign and malformed tokens as invalid with exit code 1', async () => {
    const out = join(dir, 'verify');
    await runCli(['keygen', '--replicas', '4', '--out', out]);
    const cluster = loadClusterFile(join(out, 'cluster.json'));
    const keys = [1, 2, 3].map((i) => loadReplicaKeyFile(join(out, `replica-${i}.key`), cluster));
    const grant = makeGrant({ clusterId: cluster.id, resource: 'r', epoch: 5n, holder: new Uint8Array(32) });
    const signature = combinePartials(
      cluster.backend,
      4,
      keys.map((k) => ({ index: k.index, signature: cluster.backend.sign(k.secretKey, grantMessage(grant)) })),
    )!;
    const forged = encodeToken({ ...grant, epoch: 6n }, signature);
    const clusterFile = join(out, 'cluster.json');
    const bad = await runCli(['verify', tokenToText(forged), '--cluster', clusterFile, '--json']);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stdout)).toMatchObject({ valid: false, reason: 'bad_signature' });
    const malformed = await runCli(['verify', 'AAAA', '--cluster', clusterFile, '--json']);
    expect(JSON.parse(malformed.stdout)).toMatchObject({ valid: false, reason: 'malformed', code: 'UNKNOWN_VERSION' });
    const other = join(dir, 'other');
    await runCli(['keygen', '--replicas', '4', '--out', other]);
    const foreign = await runCli([
      'verify',
      tokenToText(encodeToken(grant, signature)),
      '--cluster',
      join(other, 'cluster.json'),
    ]);
    expect(foreign.code).toBe(1);
    expect(foreign.stdout).toMatch(/wrong_cluster/);
  });

  it('gives one-line errors for a missing or corrupt cluster file', async () => {
    const missing = await runCli(['verify', 'AAAA', '--cluster', join(dir, 'nope.json')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/cannot read cluster description .*\(IO_ERROR\)/);
    const corrupt = join(dir, 'corrupt.json');
    writeFileSync(corrupt, '{"format": "quorumfence/cluster/v1", "n": 4');
    const result = await runCli(['verify', 'AAAA', '--cluster', corrupt]);
    expect(result.stderr).toMatch(/not valid JSON.*\(BAD_CLUSTER\)/);
  });

  it('answers --help', async () => {
    for (const verb of ['keygen', 'verify']) {
      const result = await runCli([verb, '--help']);
      expect(result.code).toBe(0);
      expect(result.stdout).toMatch(new RegExp(`^usage: quorumfence ${verb}`));
    }
  });
});
