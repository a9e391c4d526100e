/**
 * Both backends reproduce the committed known-answer vectors byte for byte:
 * key dealing from a seed, the cluster id, the grant message, every partial
 * and the combined token.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { clusterIdOfKey, parseCluster } from '../../src/cluster/description.js';
import { fromHex, toHex } from '../../src/common/bytes.js';
import { checkToken, decodeTokenText } from '../../src/token/admission-token.js';
import { computeKnownAnswer, type KnownAnswer } from '../support/known-answer.js';

function readFixture(name: string): KnownAnswer {
  return JSON.parse(readFileSync(new URL(`../fixtures/${name}`, import.meta.url), 'utf8')) as KnownAnswer;
}
/** v2: the cluster id from the group key alone (survives reshares). */
const fixture = readFixture('known-answer-v2.json');
/** v1 descriptions and their tokens must still be read. */
const fixtureV1 = readFixture('known-answer-v1.json');

describe.each(['blst', 'noble'] as const)('known-answer vectors (%s)', (name) => {
  const backend = loadBackend(name);

  it('reproduces every committed value', () => {
    expect(computeKnownAnswer(backend)).toEqual(fixture);
  });

  it('verifies the committed token against the committed cluster description', () => {
    const cluster = parseCluster(fixture.cluster, { backend });
    const check = checkToken(fixture.token.text, cluster);
    expect(check.ok).toBe(true);
    expect(decodeTokenText(fixture.token.text, backend).grant.epoch).toBe(BigInt(fixture.grant.epoch));
  });

  it('still reads a v1 description and verifies its committed token against it', () => {
    const cluster = parseCluster(fixtureV1.cluster, { backend });
    expect(cluster.format).toBe('quorumfence/cluster/v1');
    expect(cluster.idHex).toBe(fixtureV1.cluster.clusterId);
    expect(checkToken(fixtureV1.token.text, cluster).ok).toBe(true);
  });

  it('the v2 cluster id is SHA-256(format tag ‖ group key) alone', () => {
    const cluster = parseCluster(fixture.cluster, { backend });
    expect(cluster.idHex).toBe(toHex(clusterIdOfKey(fromHex(fixture.cluster.groupPublicKey, 48, 'key'))));
  });
});
