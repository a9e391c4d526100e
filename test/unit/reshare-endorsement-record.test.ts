/**
 * The endorsement record beside a member's key (`reshare endorse --key`): at most one description per
 * membership version, the same one again allowed, another refused with MEMBERSHIP_ALREADY_ENDORSED, an
 * unreadable record refused with BAD_KEY_FILE; nothing temporary left behind. Real files, real fsync.
 */
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadClusterFile, withEndpoints } from '../../src/cluster/description.js';
import { dealLocalCluster } from '../../src/cluster/launcher.js';
import { endorsementRecordPath, recordEndorsement } from '../../src/cli/reshare/endorse.js';
import { codeOf } from '../support/error-code.js';

const root = mkdtempSync(join(tmpdir(), 'qf-endorse-record-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('the endorsement record', () => {
  it('records once per version; the same description again is allowed; another is refused; a corrupt record refuses everything', () => {
    const { clusterPath, keyPaths } = dealLocalCluster(join(root, 'keys'), 4);
    const cluster = loadClusterFile(clusterPath);
    const key = keyPaths[1]!;
    expect(recordEndorsement(key, cluster, 2)).toBe('recorded');
    const path = endorsementRecordPath(key, cluster.membershipVersion);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(recordEndorsement(key, cluster, 2)).toBe('again');
    // Another description at the same version (one endpoint moved): refused.
    const moved = withEndpoints(
      cluster,
      cluster.replicas.map((r, k) => (k === 3 ? 'ws://127.0.0.1:1' : r.endpoint)),
    );
    expect(codeOf(() => recordEndorsement(key, moved, 2))).toBe('MEMBERSHIP_ALREADY_ENDORSED');
    // Another member's key in the same folder has a record of its own.
    expect(recordEndorsement(keyPaths[2]!, moved, 3)).toBe('recorded');
    // No temporary file is left behind.
    expect(readdirSync(join(root, 'keys')).filter((f) => f.endsWith('.tmp'))).toEqual([]);
    // A record that is not one (a torn write, an edit) refuses both descriptions until someone looks.
    writeFileSync(path, '{"format":"something else"}');
    expect(codeOf(() => recordEndorsement(key, cluster, 2))).toBe('BAD_KEY_FILE');
    writeFileSync(path, '{');
    expect(codeOf(() => recordEndorsement(key, moved, 2))).toBe('BAD_KEY_FILE');
  });
});
