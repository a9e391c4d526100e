/**
 * The token conformance vectors (test/vectors/tokens-v1.json) are what the generator makes, byte for byte,
 * and every verifier in the repository reaches each case's expected verdict and code: checkToken on both BLS
 * backends, the universal verifier (quorumfence/verify) and the guard's TokenVerifier. The browser bundle is
 * held to the same file in verify-browser.test.ts.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseCluster } from '../../src/cluster/description.js';
import { loadBackend } from '../../src/crypto/load.js';
import { TokenVerifier } from '../../src/guard/verifier.js';
import { conformanceOutcome, PRECEDENCE, verdictOf, type ConformanceVectors } from '../../src/testing/conformance.js';
import { checkToken } from '../../src/token/admission-token.js';
import { createTokenVerifier } from '../../src/verify/index.js';
import { runDevCli } from '../support/cli.js';

const FILE = new URL('../vectors/tokens-v1.json', import.meta.url);
const text = readFileSync(FILE, 'utf8');
const vectors = JSON.parse(text) as ConformanceVectors;

describe('token conformance vectors', () => {
  it('the committed file is what `quorumfence-dev vectors` writes, byte for byte', async () => {
    const run = await runDevCli(['vectors'], { timeoutMs: 60_000 });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(text);
  }, 60_000);

  it('covers valid tokens and every refusal a verifier must tell apart', () => {
    const codes = new Set(
      vectors.cases.map((c) => (c.expected.ok ? 'ok' : 'code' in c.expected ? c.expected.code : c.expected.reason)),
    );
    for (const needed of [
      'ok',
      'wrong_cluster',
      'bad_signature',
      'BAD_ENCODING',
      'BAD_LENGTH',
      'TRAILING_BYTES',
      'UNKNOWN_VERSION',
      'POINT_IDENTITY',
      'POINT_NOT_IN_SUBGROUP',
      'POINT_NOT_ON_CURVE',
      'POINT_NOT_CANONICAL',
      'EPOCH_OUT_OF_RANGE',
      'RESOURCE_EMPTY',
      'RESOURCE_TOO_LONG',
      'RESOURCE_NOT_UTF8',
      'NAME_CONTROL_CHARACTER',
    ])
      expect(codes).toContain(needed);
  });

  it("states the precedence of checks, and every case's verdict is the one its first fault gives (issue 47, item 11)", () => {
    // The file carries the order (docs/protocol.md, "Token"), the same as this repository's.
    expect(vectors.precedence).toEqual(PRECEDENCE);
    const order = vectors.precedence.map((step) => step.fault);
    for (const c of vectors.cases) {
      for (const fault of c.faults) expect(order, `${c.name}: ${fault}`).toContain(fault);
      const first = vectors.precedence.find((step) => c.faults.includes(step.fault));
      expect(c.expected, c.name).toEqual(first === undefined ? { ok: true } : first.expected);
    }
    // Each check alone, and tokens with several faults where the order decides: the verifiers above are held to them.
    const firstFault = (faults: readonly string[]) => order.find((fault) => faults.includes(fault));
    for (const fault of order)
      expect(
        vectors.cases.some((c) => firstFault(c.faults) === fault),
        `a case whose first fault is ${fault}`,
      ).toBe(true);
    const decided = vectors.cases.filter(
      (c) => new Set(c.faults.map((fault) => JSON.stringify(verdictOf([fault])))).size > 1,
    );
    expect(decided.length).toBeGreaterThanOrEqual(10);
  });

  it.each(['noble', 'blst'] as const)('checkToken with the %s backend reaches every expected verdict', (name) => {
    const cluster = parseCluster(vectors.cluster, { backend: loadBackend(name) });
    for (const c of vectors.cases) expect(conformanceOutcome(checkToken(c.token, cluster)), c.name).toEqual(c.expected);
  });

  it('the universal verifier reaches every expected verdict, from the text and from the bytes', () => {
    const verifier = createTokenVerifier(vectors.cluster);
    for (const c of vectors.cases) {
      expect(conformanceOutcome(verifier.check(c.token)), c.name).toEqual(c.expected);
      if (c.tokenHex !== '')
        expect(conformanceOutcome(verifier.check(Buffer.from(c.tokenHex, 'hex'))), c.name).toEqual(c.expected);
    }
  });

  it('the guard verifier accepts the valid ones and refuses each other one with the same code', () => {
    const verifier = new TokenVerifier(parseCluster(vectors.cluster));
    for (const c of vectors.cases) {
      const got = verifier.verify(c.token);
      // At a guard an empty token is no token at all: refused as missing, before any decoding.
      if (c.token === '') expect(got, c.name).toMatchObject({ ok: false, reason: 'missing_token' });
      else if (c.expected.ok) expect(got.ok, c.name).toBe(true);
      else if (c.expected.reason === 'malformed')
        expect(got, c.name).toMatchObject({ ok: false, reason: 'malformed', code: c.expected.code });
      else
        expect(got, c.name).toMatchObject({
          ok: false,
          reason: c.expected.reason === 'bad_signature' ? 'bad_token' : 'wrong_cluster',
        });
    }
  });

  it("a pinned id that is not its key's v2 id is refused with CLUSTER_MISMATCH", () => {
    const wrong = { ...vectors.cluster, clusterId: '00'.repeat(32) };
    expect(() => createTokenVerifier(wrong)).toThrow(expect.objectContaining({ code: 'CLUSTER_MISMATCH' }));
  });
});
