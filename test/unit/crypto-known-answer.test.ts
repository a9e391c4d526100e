/**
 * Both backends reproduce the committed known-answer vectors byte for byte:
 * key dealing from a seed, the cluster id, the grant message, every partial
 * and the combined token.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { parseCluster } from '../../src/cluster/description.js';
import { checkToken, decodeTokenText } from '../../src/token/admission-token.js';
import { computeKnownAnswer, type KnownAnswer } from '../support/known-answer.js';

const fixture = JSON.parse(
  readFileSync(new URL('../fixtures/known-answer-v1.json', import.meta.url), 'utf8'),
) as KnownAnswer;

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
});
