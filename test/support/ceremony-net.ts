/**
 * Ceremonies over real WebSocket connections on loopback, every member in
 * this process with its own transport (the CLI tests run them as processes).
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { runCli } from './cli.js';
import { freePorts } from './free-ports.js';
import { generateNodeKey, type NodeKey } from '../../src/ceremony/node-key.js';
import { makeProposal, type Proposal } from '../../src/ceremony/proposal.js';
import { runCeremony, type CeremonyOutcome } from '../../src/ceremony/runner.js';
import type { OutgoingRewrite, ProgressEvent } from '../../src/ceremony/events.js';
import type { CeremonyMember } from '../../src/ceremony/state.js';
import { openWebSocketTransport, type CeremonyTransport } from '../../src/ceremony/transport.js';

export async function proposalFor(
  nodeKeys: readonly NodeKey[],
  timeouts: { acceptTimeoutMs?: number; phaseTimeoutMs?: number } = {},
): Promise<Proposal> {
  const ports = await freePorts(nodeKeys.length);
  return makeProposal(
    nodeKeys.map((k, i) => ({
      nodeKey: k.nodeKey,
      encryptionKey: k.encryptionKey,
      endpoint: `ws://127.0.0.1:${7101 + i}`,
      ceremonyEndpoint: `ws://127.0.0.1:${ports[i]}`,
    })),
    (nodeKeys.length - 1) / 3,
    timeouts,
  );
}

export interface NetworkRun {
  proposal: Proposal;
  nodeKeys: NodeKey[];
  /** outcomes[i - 1] for member i; undefined for members not started. */
  outcomes: (CeremonyOutcome | undefined)[];
  events: ProgressEvent[][];
  /** The commitments of `dealer`'s deal as member `member` holds it. */
  dealCommitments(member: number, dealer: number): Uint8Array[];
}

export async function runNetworkCeremony(
  n: number,
  options: {
    nodeKeys?: NodeKey[];
    proposal?: Proposal;
    /** Members that never start (no process at all). */
    absent?: number[];
    rewrites?: Map<number, OutgoingRewrite>;
    acceptTimeoutMs?: number;
    phaseTimeoutMs?: number;
    /** Sees every frame a member sends. */
    tap?: (from: number, to: number, bytes: Uint8Array) => void;
    /** Called once every transport is listening, to poke at members from outside. */
    meanwhile?: (proposal: Proposal) => Promise<void>;
    /**
     * Members whose transports open (listen and start dialling) first; `beforeOthers` runs once they listen and
     * before anyone else's opens, so an outsider can reach them before the other members dial.
     */
    openFirst?: number[];
    beforeOthers?: (proposal: Proposal) => Promise<void>;
  } = {},
): Promise<NetworkRun> {
  const nodeKeys = options.nodeKeys ?? Array.from({ length: n }, () => generateNodeKey());
  const proposal =
    options.proposal ??
    (await proposalFor(nodeKeys, {
      acceptTimeoutMs: options.acceptTimeoutMs ?? 10_000,
      phaseTimeoutMs: options.phaseTimeoutMs ?? 5_000,
    }));
  const absent = new Set(options.absent ?? []);
  const events: ProgressEvent[][] = nodeKeys.map(() => []);
  const transports: CeremonyTransport[] = [];
  const members = new Map<number, CeremonyMember>();
  try {
    const first = new Set(options.openFirst ?? []);
    const openOne = async (nodeKey: NodeKey, k: number) => {
      const real = await openWebSocketTransport({ proposal, self: k + 1, nodeKey });
      transports.push(real);
      const tap = options.tap;
      const transport: CeremonyTransport = tap
        ? { ...real, send: (to, bytes) => (tap(k + 1, to, bytes), real.send(to, bytes)) }
        : real;
      return { nodeKey, self: k + 1, transport };
    };
    const none = Promise.resolve(undefined);
    const opened = await Promise.all(
      nodeKeys.map((nodeKey, k) => (!absent.has(k + 1) && first.has(k + 1) ? openOne(nodeKey, k) : none)),
    );
    await options.beforeOthers?.(proposal);
    const running = await Promise.all(
      nodeKeys.map((nodeKey, k) =>
        absent.has(k + 1) ? none : first.has(k + 1) ? Promise.resolve(opened[k]) : openOne(nodeKey, k),
      ),
    );
    const outcomes = Promise.all(
      running.map((r) =>
        r
          ? runCeremony({
              proposal,
              nodeKey: r.nodeKey,
              self: r.self,
              transport: r.transport,
              rewrite: options.rewrites?.get(r.self),
              onEvent: (event, member) => {
                events[r.self - 1]!.push(event);
                members.set(r.self, member);
              },
            })
          : Promise.resolve(undefined),
      ),
    );
    await options.meanwhile?.(proposal);
    return {
      proposal,
      nodeKeys,
      outcomes: await outcomes,
      events,
      dealCommitments: (member, dealer) => members.get(member)!.dealCommitments(dealer)!,
    };
  } finally {
    await Promise.all(transports.map((t) => t.close()));
  }
}

/**
 * `quorumfence replica init` for members 1..n as real processes: each gets its node key in
 * `base/<dataName(i)>` (checked 0600) and a member card in `base/public/card-<i>.json`, listening for the
 * ceremony on a free loopback port. Returns the card paths in member order.
 */
export async function initMemberCards(
  base: string,
  n: number,
  dataName: (index: number) => string = (index) => `replica-${index}`,
): Promise<string[]> {
  const ports = await freePorts(n);
  const cards: string[] = [];
  for (let i = 1; i <= n; i++) {
    const card = join(base, 'public', `card-${i}.json`);
    const result = await runCli([
      'replica',
      'init',
      '--data',
      join(base, dataName(i)),
      '--endpoint',
      `ws://127.0.0.1:${7100 + i}`,
      '--ceremony-endpoint',
      `ws://127.0.0.1:${ports[i - 1]}`,
      '--card',
      card,
    ]);
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ format: 'quorumfence/member-card/v1' });
    expect(statSync(join(base, dataName(i), 'node.key')).mode & 0o777).toBe(0o600);
    cards.push(card);
  }
  return cards;
}

/**
 * `quorumfence dkg propose` as a real process, for the members whose cards are `cards` and tolerating `f` faults;
 * checks it succeeded and returns `out`. `extra`: more flags (a reshare's `--old-cluster`, `--dealers`).
 */
export async function proposeCeremony(
  cards: readonly string[],
  f: number,
  out: string,
  extra: readonly string[] = [],
): Promise<string> {
  const result = await runCli(
    ['dkg', 'propose', ...cards.flatMap((c) => ['--member', c]), '--f', String(f), '--out', out, ...extra],
    { timeoutMs: 60_000 },
  );
  expect(result.code, result.stderr).toBe(0);
  return out;
}
