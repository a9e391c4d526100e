/**
 * Known-answer vectors: a fixed seed deals a fixed cluster; a fixed grant;
 * every replica's partial; the token. Committed in test/fixtures so any change
 * to the key derivation, hashing, combining or byte layout fails loudly.
 * The seed is a public test value: keys derived from it protect nothing.
 */
import { toHex } from '../../src/common/bytes.js';
import type { BlsBackend } from '../../src/crypto/backend.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { clusterToJson, type ClusterDescriptionJson } from '../../src/cluster/description.js';
import { encodeToken, tokenToText } from '../../src/token/admission-token.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';
import { dealCluster } from './dealt-cluster.js';

export const KNOWN_ANSWER_SEED = new TextEncoder().encode('quorumfence known-answer vector v1');

export interface KnownAnswer {
  seed: string;
  cluster: ClusterDescriptionJson;
  grant: { resource: string; epoch: string; holder: string; message: string };
  partials: { index: number; signature: string }[];
  /** Token combined from replicas 1, 2, 3 (any other t-set gives the same bytes). */
  token: { hex: string; text: string };
}

export function computeKnownAnswer(backend: BlsBackend): KnownAnswer {
  const dealt = dealCluster(4, backend, KNOWN_ANSWER_SEED);
  const holder = Uint8Array.from({ length: 32 }, (_, k) => k);
  const grant = makeGrant({
    clusterId: dealt.cluster.id,
    resource: 'payments/ledger-7',
    epoch: 1234567890123n,
    holder,
  });
  const partials = [1, 2, 3, 4].map((index) => ({ index, signature: dealt.partial(index, grant) }));
  const token = encodeToken(grant, combinePartials(backend, 4, partials.slice(0, 3))!);
  return {
    seed: new TextDecoder().decode(KNOWN_ANSWER_SEED),
    cluster: clusterToJson(dealt.cluster),
    grant: {
      resource: grant.resource,
      epoch: grant.epoch.toString(),
      holder: toHex(holder),
      message: toHex(grantMessage(grant)),
    },
    partials: partials.map((p) => ({ index: p.index, signature: toHex(p.signature.bytes) })),
    token: { hex: toHex(token.bytes), text: tokenToText(token) },
  };
}
