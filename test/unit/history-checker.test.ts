/**
 * The history checker catches each kind of violation in hand-written
 * histories, shows the entries that prove it, and passes valid histories.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { toHex } from '../../src/common/bytes.js';
import { encodeToken, tokenDigest, tokenToText } from '../../src/token/admission-token.js';
import { makeGrant } from '../../src/token/grant.js';
import type { GuardLogEntry } from '../../src/guard/log.js';
import { checkHistory, formatViolation, type History } from '../../src/testing/history-checker.js';
import { dealCluster, type DealtCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
let dealt: DealtCluster;

interface Issued {
  text: string;
  digest: string;
  epoch: bigint;
  holder: string;
}

function issue(resource: string, epoch: bigint, holderByte: number, signers = [1, 2, 3]): Issued {
  const holder = new Uint8Array(32).fill(holderByte);
  const grant = makeGrant({ clusterId: dealt.cluster.id, resource, epoch, holder });
  const token = encodeToken(
    grant,
    combinePartials(
      backend,
      4,
      signers.map((index) => ({ index, signature: dealt.partial(index, grant) })),
    )!,
  );
  return { text: tokenToText(token), digest: toHex(tokenDigest(token)), epoch, holder: toHex(holder) };
}

let seq = 0;
function entry(
  resource: string,
  token: Issued,
  outcome: GuardLogEntry['outcome'],
  extra: Partial<GuardLogEntry> = {},
): GuardLogEntry {
  return {
    seq: ++seq,
    op: 'put',
    resource,
    key: 'counter',
    accepted: outcome === 'accepted',
    outcome,
    epoch: token.epoch.toString(),
    holder: token.holder,
    tokenDigest: token.digest,
    token: outcome === 'accepted' || outcome === 'conflict' ? token.text : null,
    barrierBefore: null,
    barrierAfter: null,
    version: outcome === 'accepted' ? seq : null,
    conflictingToken: null,
    errorCode: null,
    ...extra,
  };
}

beforeAll(() => {
  dealt = dealCluster(4, backend);
});

describe('history checker', () => {
  it('passes a valid history: rising epochs, refusals, repeated writes with one token', () => {
    const a = issue('r', 1n, 1);
    const b = issue('r', 2n, 2);
    const log = [
      entry('r', a, 'accepted'),
      entry('r', a, 'accepted'),
      entry('r', b, 'accepted'),
      entry('r', a, 'stale'),
      entry('other', a, 'wrong_resource'),
    ];
    const history: History = {
      guardLogs: [log],
      capturedTokens: [a.text, b.text, a.text],
      acknowledged: [{ guard: 0, resource: 'r', key: 'counter', tokenDigest: b.digest, version: log[2]!.version! }],
      finalVersions: [new Map([['r\u0000counter', log[2]!.version!]])],
    };
    const result = checkHistory(history, dealt.cluster);
    expect(result.ok).toBe(true);
    expect(result.stats).toMatchObject({ entries: 5, accepted: 3, refusedByReason: { stale: 1, wrong_resource: 1 } });
  });

  it('catches an accepted epoch going down, showing both entries', () => {
    const a = issue('r', 5n, 1);
    const b = issue('r', 4n, 2);
    const log = [entry('r', a, 'accepted'), entry('r', b, 'accepted')];
    const result = checkHistory({ guardLogs: [log] }, dealt.cluster);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.violations).toEqual([
      expect.objectContaining({ kind: 'epoch_went_down', earlier: log[0], later: log[1] }),
    ]);
    expect(formatViolation(result.violations[0]!)).toMatch(
      /epoch went down.*\n.*epoch 5 accepted.*\n.*epoch 4 accepted/,
    );
  });

  it('catches two valid tokens for one (resource, epoch), from captured tokens alone', () => {
    const a = issue('r', 7n, 1, [1, 2, 3]);
    const b = issue('r', 7n, 2, [2, 3, 4]);
    const result = checkHistory(
      { guardLogs: [[]], capturedTokens: [a.text, issue('r', 8n, 1).text, b.text] },
      dealt.cluster,
    );
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.violations).toEqual([
      expect.objectContaining({ kind: 'duplicate_token', resource: 'r', epoch: '7' }),
    ]);
    expect(formatViolation(result.violations[0]!)).toMatch(/captured token #0[\s\S]*captured token #2/);
  });

  it('catches two valid tokens for one epoch across two guards, and in a refused conflict entry', () => {
    const a = issue('r', 3n, 1);
    const b = issue('r', 3n, 2);
    const acrossGuards = checkHistory(
      { guardLogs: [[entry('r', a, 'accepted')], [entry('r', b, 'accepted')]] },
      dealt.cluster,
    );
    expect(acrossGuards.ok).toBe(false);
    const conflict = checkHistory(
      { guardLogs: [[entry('r', a, 'accepted'), entry('r', b, 'conflict', { conflictingToken: a.text })]] },
      dealt.cluster,
    );
    expect(conflict.ok).toBe(false);
    if (!conflict.ok) expect(conflict.violations[0]!.kind).toBe('duplicate_token');
  });

  it('does not count invalid tokens as duplicates, but flags an accepted invalid token and a held one', () => {
    const a = issue('r', 9n, 1);
    const other = dealCluster(4, backend);
    const holder = new Uint8Array(32).fill(3);
    const grant = makeGrant({ clusterId: other.cluster.id, resource: 'r', epoch: 9n, holder });
    const foreign = encodeToken(
      grant,
      combinePartials(
        backend,
        4,
        [1, 2, 3].map((index) => ({ index, signature: other.partial(index, grant) })),
      )!,
    );
    const foreignIssued: Issued = {
      text: tokenToText(foreign),
      digest: toHex(tokenDigest(foreign)),
      epoch: 9n,
      holder: toHex(holder),
    };
    // Not a duplicate of `a`; but a client holding it holds a token that does not verify.
    const held = checkHistory(
      { guardLogs: [[entry('r', a, 'accepted')]], capturedTokens: [foreignIssued.text] },
      dealt.cluster,
    );
    expect(held.ok).toBe(false);
    if (!held.ok)
      expect(held.violations).toEqual([
        expect.objectContaining({ kind: 'unverified_token', captured: 0, why: expect.stringMatching(/wrong_cluster/) }),
      ]);
    const accepted = checkHistory({ guardLogs: [[entry('r', foreignIssued, 'accepted')]] }, dealt.cluster);
    expect(accepted.ok).toBe(false);
    if (!accepted.ok)
      expect(accepted.violations[0]).toMatchObject({
        kind: 'invalid_token',
        why: expect.stringMatching(/wrong_cluster/),
      });
    const mislabelled = checkHistory({ guardLogs: [[entry('s', a, 'accepted')]] }, dealt.cluster);
    expect(mislabelled.ok).toBe(false);
  });

  it('catches an acknowledged write missing from the log, and a final version that lost it', () => {
    const a = issue('r', 1n, 1);
    const log = [entry('r', a, 'accepted'), entry('r', a, 'accepted')];
    const acknowledged = log.map((e) => ({
      guard: 0,
      resource: 'r',
      key: 'counter',
      tokenDigest: a.digest,
      version: e.version!,
    }));
    const missing = checkHistory({ guardLogs: [log.slice(0, 1)], acknowledged }, dealt.cluster);
    expect(missing.ok).toBe(false);
    if (!missing.ok)
      expect(missing.violations).toEqual([expect.objectContaining({ kind: 'lost_write', write: acknowledged[1] })]);
    const rolledBack = checkHistory(
      { guardLogs: [log], acknowledged, finalVersions: [new Map([['r\u0000counter', log[0]!.version!]])] },
      dealt.cluster,
    );
    expect(rolledBack.ok).toBe(false);
    if (!rolledBack.ok)
      expect(formatViolation(rolledBack.violations[0]!)).toMatch(/acknowledged write lost \(the store holds version/);
  });

  it('skips a key whose final state could not be read (unreadFinal) instead of calling its write lost', () => {
    const a = issue('r', 1n, 1);
    const log = [entry('r', a, 'accepted')];
    const acknowledged = [
      { guard: 0, resource: 'r', key: 'counter', tokenDigest: a.digest, version: log[0]!.version! },
    ];
    const unread = checkHistory(
      { guardLogs: [log], acknowledged, finalVersions: [new Map()], unreadFinal: [new Set(['r\u0000counter'])] },
      dealt.cluster,
    );
    expect(unread.ok).toBe(true);
    // Read, and absent: that one is lost.
    const absent = checkHistory({ guardLogs: [log], acknowledged, finalVersions: [new Map()] }, dealt.cluster);
    expect(absent.ok).toBe(false);
    if (!absent.ok) expect(absent.violations).toEqual([expect.objectContaining({ kind: 'lost_write' })]);
  });

  describe('across a reshare (tokenGenerations, reshares)', () => {
    it('passes tokens of the new share generation above the old ones, and a membership change that keeps the cluster', () => {
      const old = [issue('r', 1n, 1), issue('r', 4n, 2), issue('s', 9n, 1)];
      const fresh = [issue('r', 5n, 3), issue('s', 10n, 2), issue('t', 1n, 2)];
      const tokenGenerations = new Map([
        ...old.map((t) => [t.text, 0] as const),
        ...fresh.map((t) => [t.text, 1] as const),
      ]);
      const after = { ...dealt.cluster, membershipVersion: 1 };
      const check = checkHistory(
        {
          guardLogs: [[entry('r', old[1]!, 'accepted'), entry('r', fresh[0]!, 'accepted')]],
          tokenGenerations,
          reshares: [{ before: dealt.cluster, after }],
        },
        dealt.cluster,
      );
      expect(check).toMatchObject({ ok: true });
    });

    it('catches a token of the new generation below one of the old (the new set re-granted an old epoch), naming both', () => {
      const before = issue('r', 5n, 1);
      const reissued = issue('r', 3n, 2);
      const later = issue('r', 7n, 2);
      const check = checkHistory(
        {
          guardLogs: [[entry('r', before, 'accepted')]],
          tokenGenerations: new Map([
            [before.text, 0],
            [reissued.text, 1],
            [later.text, 1],
          ]),
        },
        dealt.cluster,
      );
      expect(check.ok).toBe(false);
      if (check.ok) return;
      expect(check.violations).toEqual([
        {
          kind: 'epoch_below_reshare',
          resource: 'r',
          earlier: { generation: 0, epoch: '5', digest: before.digest },
          later: { generation: 1, epoch: '3', digest: reissued.digest },
        },
      ]);
      expect(formatViolation(check.violations[0]!)).toMatch(
        /granted again after a reshare[\s\S]*generation 0 epoch 5[\s\S]*generation 1 epoch 3/,
      );
      // The same tokens all in one generation are no violation of this rule (only a lower epoch later).
      const oneGeneration = checkHistory(
        {
          guardLogs: [[entry('r', before, 'accepted')]],
          tokenGenerations: new Map([
            [before.text, 0],
            [reissued.text, 0],
          ]),
        },
        dealt.cluster,
      );
      expect(oneGeneration.ok).toBe(true);
    });

    it('ignores tokens that do not verify when comparing generations', () => {
      const before = issue('r', 5n, 1);
      const forged = issue('r', 3n, 2, [1, 2]); // two partials: no valid signature
      const check = checkHistory(
        {
          guardLogs: [[]],
          tokenGenerations: new Map([
            [before.text, 0],
            [forged.text, 1],
          ]),
        },
        dealt.cluster,
      );
      expect(check.ok).toBe(true);
    });

    it('catches a membership change that is another cluster, another key, or not newer (cluster_changed)', () => {
      const other = dealCluster(4, backend).cluster;
      const cases = [
        { before: dealt.cluster, after: { ...other, membershipVersion: 1 }, why: /cluster id/ },
        {
          before: dealt.cluster,
          after: { ...dealt.cluster, groupPublicKey: other.groupPublicKey, membershipVersion: 1 },
          why: /group public key changed/,
        },
        { before: dealt.cluster, after: dealt.cluster, why: /membership 0 is not above 0/ },
      ];
      for (const { before, after, why } of cases) {
        const check = checkHistory({ guardLogs: [[]], reshares: [{ before, after }] }, dealt.cluster);
        expect(check.ok).toBe(false);
        if (check.ok) continue;
        expect(check.violations).toEqual([expect.objectContaining({ kind: 'cluster_changed' })]);
        expect(formatViolation(check.violations[0]!)).toMatch(why);
      }
    });
  });
});
