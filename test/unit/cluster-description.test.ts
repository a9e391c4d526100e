/**
 * Loading a cluster description checks everything, and each error names the
 * field; the cluster id ignores endpoints.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import {
  clusterToJson,
  parseCluster,
  withEndpoints,
  type ClusterDescriptionJson,
} from '../../src/cluster/description.js';
import { parseReplicaKey, replicaKeyJson } from '../../src/cluster/replica-key.js';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';
import { dealCluster, type DealtCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
let dealt: DealtCluster;
let json: ClusterDescriptionJson;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- mutations reach into arbitrary nested fields of parsed JSON
function failure(mutate: (d: Record<string, any>) => void): { code: string; field: unknown; message: string } {
  const copy = JSON.parse(JSON.stringify(json));
  mutate(copy);
  try {
    parseCluster(copy, { backend });
  } catch (error) {
    if (isQuorumFenceError(error)) return { code: error.code, field: error.details?.field, message: error.message };
    throw error;
  }
  return { code: 'accepted', field: undefined, message: '' };
}

beforeAll(() => {
  dealt = dealCluster(7, backend);
  json = clusterToJson(dealt.cluster);
});

describe('cluster description', () => {
  it('parses what it writes, and the id ignores endpoints', () => {
    const parsed = parseCluster(json, { backend });
    expect(parsed.idHex).toBe(json.clusterId);
    const moved = withEndpoints(
      parsed,
      parsed.replicas.map((_, k) => `wss://replica-${k}.example:443`),
    );
    expect(parseCluster(clusterToJson(moved), { backend }).idHex).toBe(json.clusterId);
  });

  it('refuses an unknown format with UNKNOWN_VERSION', () => {
    expect(failure((d) => (d.format = 'quorumfence/cluster/v3')).code).toBe('UNKNOWN_VERSION');
  });

  it('refuses sizes that are not n = 3f+1, t = 2f+1', () => {
    expect(failure((d) => (d.n = 8))).toMatchObject({ code: 'BAD_CLUSTER', field: 'n' });
    expect(failure((d) => (d.t = 4))).toMatchObject({ code: 'BAD_CLUSTER', field: 't' });
    expect(failure((d) => (d.f = 0))).toMatchObject({ code: 'BAD_CLUSTER', field: 'f' });
  });

  it('names the bad point field', () => {
    expect(failure((d) => (d.groupPublicKey = d.groupPublicKey.slice(2)))).toMatchObject({
      code: 'BAD_CLUSTER',
      field: 'groupPublicKey',
    });
    expect(failure((d) => (d.commitments[1] = 'c0' + '00'.repeat(47)))).toMatchObject({
      code: 'BAD_CLUSTER',
      field: 'commitments[1]',
    });
    expect(failure((d) => (d.replicas[2].publicKeyShare = d.replicas[2].publicKeyShare.toUpperCase()))).toMatchObject({
      code: 'BAD_CLUSTER',
      field: 'replicas[2].publicKeyShare',
    });
    expect(failure((d) => d.commitments.pop())).toMatchObject({ code: 'BAD_CLUSTER', field: 'commitments' });
  });

  it('refuses shares that do not match the Feldman commitments', () => {
    const swapped = failure((d) => {
      [d.replicas[1].publicKeyShare, d.replicas[4].publicKeyShare] = [
        d.replicas[4].publicKeyShare,
        d.replicas[1].publicKeyShare,
      ];
    });
    expect(swapped).toMatchObject({ code: 'BAD_CLUSTER', field: 'replicas[1].publicKeyShare' });
    expect(swapped.message).toMatch(/replicas 2, 5/);
    const otherCluster = clusterToJson(dealCluster(7, backend).cluster);
    expect(failure((d) => (d.commitments = otherCluster.commitments)).code).toBe('BAD_CLUSTER');
  });

  it('refuses a cluster id that does not match with CLUSTER_MISMATCH', () => {
    expect(failure((d) => (d.clusterId = 'ab'.repeat(32))).code).toBe('CLUSTER_MISMATCH');
  });

  it('refuses bad endpoints and misordered replicas', () => {
    expect(failure((d) => (d.replicas[0].endpoint = 'http://x'))).toMatchObject({
      code: 'BAD_CLUSTER',
      field: 'replicas[0].endpoint',
    });
    expect(failure((d) => (d.replicas[0].endpoint = 42))).toMatchObject({
      code: 'BAD_CLUSTER',
      field: 'replicas[0].endpoint',
    });
    expect(failure((d) => d.replicas.reverse())).toMatchObject({ code: 'BAD_CLUSTER', field: 'replicas[0].index' });
    expect(failure((d) => (d.replicas = 'none'))).toMatchObject({ code: 'BAD_CLUSTER', field: 'replicas' });
  });

  it('checks a replica key file against its cluster', () => {
    const keyJson = replicaKeyJson(json.clusterId, dealt.key.shares[2]!);
    expect(parseReplicaKey(keyJson, dealt.cluster).index).toBe(3);
    const code = (value: unknown) => {
      try {
        parseReplicaKey(value, dealt.cluster);
        return 'accepted';
      } catch (error) {
        return isQuorumFenceError(error) ? error.code : 'other';
      }
    };
    expect(code({ ...keyJson, index: 4 })).toBe('SHARE_MISMATCH');
    expect(code({ ...keyJson, clusterId: '00'.repeat(32) })).toBe('CLUSTER_MISMATCH');
    expect(code({ ...keyJson, secretShare: 'zz' })).toBe('BAD_KEY_FILE');
    expect(code({ ...keyJson, format: 'x' })).toBe('UNKNOWN_VERSION');
  });
});

describe('cluster sizes N = 4 .. 31', () => {
  it.each([4, 13, 31])('deals, loads and combines at N = %i', (n) => {
    const cluster = dealCluster(n, backend);
    const t = (2 * n + 1) / 3;
    const grant = makeGrant({ clusterId: cluster.cluster.id, resource: 'r', epoch: 1n, holder: new Uint8Array(32) });
    // The last t replicas: the signer set with the largest coefficients.
    const partials = Array.from({ length: t }, (_, k) => n - k).map((index) => ({
      index,
      signature: cluster.partial(index, grant),
    }));
    const combined = combinePartials(backend, n, partials)!;
    expect(backend.verify(cluster.cluster.groupPublicKey, grantMessage(grant), combined)).toBe(true);
  });
});
