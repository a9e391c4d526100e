/**
 * `quorumfence dkg propose|run`: the dealerless key ceremony. `propose` turns
 * member cards into a proposal; `run` takes part in it for one replica, with
 * progress on stderr (JSON log lines), and writes the replica's share (0600) and the public
 * cluster.json into its own data directory only.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { fromHex, toHex } from '../common/bytes.js';
import { createSigningRecord, signingRecordExists } from '../replica/signing-record.js';
import { createLogger, type Logger } from '../common/log.js';
import { LogLimiter } from '../common/log-limiter.js';
import { loadClusterFile, type Cluster } from '../cluster/description.js';
import { readJsonFile, refuseIrregularFile, writeFileDurably } from '../common/files.js';
import { loadNodeKeyFile, parseMemberCard } from '../ceremony/node-key.js';
import { assertNoKeyYet, CLUSTER_FILE, REPLICA_KEY_FILE, writeCeremonyOutput } from '../ceremony/output.js';
import {
  DEFAULT_ACCEPT_TIMEOUT_MS,
  DEFAULT_PHASE_TIMEOUT_MS,
  makeProposal,
  memberIndexOf,
  parseProposal,
  type OutsideDealerJson,
  type Proposal,
} from '../ceremony/proposal.js';
import { runCeremony } from '../ceremony/runner.js';
import type { CeremonyResult, ProgressEvent } from '../ceremony/events.js';
import type { CeremonyMember } from '../ceremony/state.js';
import { openWebSocketTransport } from '../ceremony/transport.js';
import {
  integerFlag,
  parseDuration,
  parseFlags,
  parseListen,
  required,
  runSubcommand,
  type Command,
} from '../command/args.js';

const usage = `usage: quorumfence dkg propose --member CARD --member CARD ... --f F [--out FILE] [options]
       quorumfence dkg propose --member CARD ... --f F --old-cluster FILE --dealers LIST
                               [--outside-dealer INDEX=CARD ...] [--out FILE] [options]
       quorumfence dkg run --data DIR --proposal FILE [--listen HOST:PORT] [--publish FILE] [--json]

A key ceremony among the N = 3f+1 replicas, with no dealer: each replica
deals a random secret to the others (Feldman VSS, shares encrypted to each
recipient), bad deals are found by complaints and justifications, and each
replica keeps only its own share of a key nobody ever holds.

propose: write a proposal from the members' cards (made by "quorumfence replica
init"), in replica index order, with a fresh ceremony id.
  --member CARD            a member card file; one per replica, in index order  (required)
  --f F                    faults tolerated; needs 3f+1 cards                     (required)
  --out FILE               write the proposal here (default: stdout)
  --if-missing             keep FILE if it already exists (default: refuse)
  --accept-timeout D       how long members wait for every member to accept   (default ${DEFAULT_ACCEPT_TIMEOUT_MS / 1000}s)
  --phase-timeout D        deadline of each later phase                         (default ${DEFAULT_PHASE_TIMEOUT_MS / 1000}s)
  --old-cluster FILE       a RESHARE proposal ("quorumfence reshare run"): the cluster being reshared;
                           its id and membership version go into the proposal's digest
  --dealers LIST           with --old-cluster: the old replica indices that deal, e.g. 1,2,3 (>= t_old)
  --outside-dealer INDEX=CARD
                           with --old-cluster: old replica INDEX deals from OUTSIDE the new set (it is
                           leaving, e.g. 5, 6 and 7 of a 7 -> 4 removal), with the node key and ceremony
                           endpoint of CARD ("replica init"); it deals and receives nothing. INDEX must be
                           among --dealers; every dealer above the new n needs one. Repeat per dealer.

run: take part for the replica whose node key is in DIR. Every member runs
this with the same proposal; it finishes when all have. Progress on stderr (JSON log lines).
On success writes DIR/${REPLICA_KEY_FILE} (secret, 0600) and DIR/${CLUSTER_FILE} (public,
with every confirming member's signature), and makes the replica's empty signing
record in DIR ("replica --data DIR"; refused before the ceremony if DIR holds one:
a new key starts from a new record). On an abort writes nothing and
exits 1 naming the members at fault; make a fresh proposal and run again.
  --data DIR               the replica's data directory (holds node.key)         (required)
  --proposal FILE          the proposal                                          (required)
  --listen HOST:PORT       where to listen (default: the host:port of this member's ceremony endpoint)
  --publish FILE           also write the public cluster.json to FILE
  --if-missing             exit 0 when DIR already holds this proposal's output
  --json                   print the outcome as one JSON object on stdout
`;

export const command: Command = {
  summary: 'dealerless key ceremony: propose from member cards, run as one member',
  usage,
  run: (argv) => runSubcommand(argv, { propose, run }),
};

/**
 * The dealers of a reshare: old replica indices, ascending and distinct, at least t_old of them.
 * @throws QuorumFenceError INVALID_OPTION (not indices of the old cluster), RESHARE_REFUSED (fewer than t_old)
 */
export function parseDealers(text: string, old: Cluster): number[] {
  const dealers = text.split(',').map((s) => Number(s.trim()));
  if (dealers.some((d) => !Number.isInteger(d) || d < 1 || d > old.n))
    throw new QuorumFenceError('INVALID_OPTION', `--dealers: expected old replica indices 1..${old.n}, got "${text}"`);
  const distinct = [...new Set(dealers)].sort((a, b) => a - b);
  if (distinct.length < old.t)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `--dealers: at least t_old = ${old.t} distinct old replicas must deal`,
    );
  return distinct;
}

/**
 * `--outside-dealer INDEX=CARD` entries: old replicas that deal from outside the new set, ascending by index.
 * @throws QuorumFenceError INVALID_OPTION (malformed, repeated), RESHARE_REFUSED (not a replica of the old
 *   cluster), BAD_PROPOSAL (the card)
 */
export function parseOutsideDealers(entries: readonly string[], old: Cluster): OutsideDealerJson[] {
  const parsed = entries.map((entry) => {
    const match = /^(\d+)=(.+)$/.exec(entry);
    if (!match) throw new QuorumFenceError('INVALID_OPTION', `--outside-dealer: expected INDEX=CARD, got "${entry}"`);
    const oldIndex = Number(match[1]);
    if (oldIndex < 1 || oldIndex > old.n)
      throw new QuorumFenceError(
        'RESHARE_REFUSED',
        `--outside-dealer: old replica ${oldIndex} is not a replica of the old cluster (1..${old.n}); only its members can deal`,
      );
    const card = parseMemberCard(
      readJsonFile(resolve(match[2]!), 'member card', 'BAD_PROPOSAL'),
      `--outside-dealer ${entry}`,
    );
    return { oldIndex, nodeKey: toHex(card.nodeKey), ceremonyEndpoint: card.ceremonyEndpoint };
  });
  parsed.sort((a, b) => a.oldIndex - b.oldIndex);
  if (parsed.some((d, k) => k > 0 && d.oldIndex === parsed[k - 1]!.oldIndex))
    throw new QuorumFenceError('INVALID_OPTION', '--outside-dealer: an old replica is named twice');
  return parsed;
}

function propose(argv: string[]): number {
  const { values } = parseFlags(argv, {
    member: { type: 'string', multiple: true },
    f: { type: 'string' },
    out: { type: 'string' },
    'if-missing': { type: 'boolean' },
    'accept-timeout': { type: 'string' },
    'phase-timeout': { type: 'string' },
    'old-cluster': { type: 'string' },
    dealers: { type: 'string' },
    'outside-dealer': { type: 'string', multiple: true },
  });
  if ((values['old-cluster'] === undefined) !== (values.dealers === undefined))
    throw new QuorumFenceError('INVALID_OPTION', '--old-cluster and --dealers go together (a reshare proposal)');
  const old = values['old-cluster'] ? loadClusterFile(resolve(values['old-cluster'])) : undefined;
  if (!old && values['outside-dealer'])
    throw new QuorumFenceError('INVALID_OPTION', '--outside-dealer goes with --old-cluster and --dealers');
  const outsideDealers = old ? parseOutsideDealers(values['outside-dealer'] ?? [], old) : [];
  const reshare = old && {
    oldClusterId: old.idHex,
    oldMembershipVersion: old.membershipVersion,
    dealers: parseDealers(values.dealers!, old),
    ...(outsideDealers.length > 0 ? { outsideDealers } : {}),
  };
  const f = integerFlag(required(values.f, 'f'), 'f', 1, 1, 10);
  const cards = (values.member ?? []).map((path, k) =>
    parseMemberCard(readJsonFile(resolve(path), 'member card', 'BAD_PROPOSAL'), `--member ${path} (member ${k + 1})`),
  );
  if (cards.length !== 3 * f + 1) {
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `--f ${f} needs 3f+1 = ${3 * f + 1} --member cards, got ${cards.length}`,
    );
  }
  const out = values.out ? resolve(values.out) : undefined;
  if (out && values['if-missing'] && existsSync(out)) {
    parseProposal(readJsonFile(out, 'proposal', 'BAD_PROPOSAL'));
    process.stderr.write(`${out} already exists; keeping it\n`);
    return 0;
  }
  const proposal = makeProposal(cards, f, {
    acceptTimeoutMs: parseDuration(values['accept-timeout'], 'accept-timeout', DEFAULT_ACCEPT_TIMEOUT_MS),
    phaseTimeoutMs: parseDuration(values['phase-timeout'], 'phase-timeout', DEFAULT_PHASE_TIMEOUT_MS),
    ...(reshare ? { reshare } : {}),
  });
  const text = JSON.stringify(proposal.json, null, 2) + '\n';
  if (out) {
    mkdirSync(dirname(out), { recursive: true });
    writeFileDurably(out, text, { exclusive: true });
    process.stderr.write(
      `wrote ${out}: ceremony ${proposal.json.ceremonyId.slice(0, 16)}…, n = ${proposal.n}, t = ${proposal.t}\n`,
    );
  } else process.stdout.write(text);
  return 0;
}

/** Proposals this data directory has taken part in: one never runs twice, so old packets cannot be replayed into a rerun. */
const ATTEMPTS_FILE = 'ceremony-attempts.json';

export function recordAttempt(dataDir: string, proposal: Proposal): void {
  const path = join(dataDir, ATTEMPTS_FILE);
  const attempts = existsSync(path) ? (readJsonFile(path, 'ceremony attempts', 'BAD_PROPOSAL') as string[]) : [];
  const digest = toHex(proposal.digest);
  if (Array.isArray(attempts) && attempts.includes(digest)) {
    throw new QuorumFenceError(
      'BAD_PROPOSAL',
      `this replica already took part in proposal ${digest.slice(0, 16)}…; make a fresh one with "quorumfence dkg propose"`,
    );
  }
  writeFileDurably(path, JSON.stringify([...(Array.isArray(attempts) ? attempts : []), digest]) + '\n');
}

/**
 * Progress of a running ceremony on the log, for `dkg run` and `reshare run`: each event as a JSON line
 * (`event: "ceremony"`, `kind` = the event's kind, with its fields; docs/operations.md, "Logs"), whose `msg` is
 * `prefix: ` and a short description; refused frames through a LogLimiter, with a `suppressed` count; and, every
 * 2 s, who the current phase still waits for (`kind: "waiting"`). The caller passes onEvent to the runner and
 * calls stop when the ceremony is over.
 */
export function reportCeremonyProgress(
  logger: Logger,
  prefix: string,
): {
  readonly onEvent: (event: ProgressEvent, member: CeremonyMember) => void;
  readonly stop: () => void;
} {
  let member: CeremonyMember | undefined;
  // A flood of garbage frames must not flood the log too.
  const limiter = new LogLimiter<'ceremony_refused'>();
  const summarise = () => {
    for (const { key, count } of limiter.drain())
      logger.info({ event: 'suppressed', of: key, count }, `${prefix}: ${count} refused frames not logged`);
  };
  // Every 2 s, who the current phase still waits for.
  const waiting = setInterval(() => {
    const missing = member?.missing() ?? [];
    if (member && missing.length > 0)
      logger.info(
        { event: 'ceremony', kind: 'waiting', phase: member.phase, missing },
        `${prefix}:   ${member.phase}: waiting for ${missing.join(', ')}`,
      );
    summarise();
  }, 2000);
  return {
    onEvent: (event, m) => {
      member = m;
      if (event.kind === 'refused' && !limiter.admit('ceremony_refused', performance.now())) return;
      const fields = { event: 'ceremony', ...event };
      const line = `${prefix}: ${describeEvent(event)}`;
      if (event.kind === 'aborted') logger.error(fields, line);
      else if (event.kind === 'refused' || event.kind === 'excluded') logger.warn(fields, line);
      else logger.info(fields, line);
    },
    stop: () => {
      clearInterval(waiting);
      summarise();
    },
  };
}

/** The ceremony's log: JSON lines on stderr (stdout carries the command's result), naming the ceremony and member. */
export function ceremonyLogger(proposal: Proposal, self: number): Logger {
  return createLogger('ceremony', { destination: 2 }).child({ ceremonyId: toHex(proposal.ceremonyId), member: self });
}

function describeEvent(event: ProgressEvent): string {
  switch (event.kind) {
    case 'phase':
      return `phase ${event.phase}`;
    case 'phase-closed':
      return `  ${event.phase}: from ${event.received.join(', ') || 'nobody'}${
        event.missing.length > 0 ? `; missing ${event.missing.join(', ')} (deadline passed)` : ''
      }`;
    case 'excluded':
      return `  dealer ${event.dealer} excluded: ${event.reason}`;
    case 'refused':
      return `  refused a frame (${event.code}): ${event.reason}`;
    case 'done':
      return `done: cluster ${event.clusterId}, qualified dealers ${event.qualified.join(', ')}${event.adopted ? ' (confirmed by t members; this member had drafted another result and takes theirs)' : ''}`;
    case 'aborted':
      return `aborted: ${event.reason}`;
  }
}

async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    proposal: { type: 'string' },
    listen: { type: 'string' },
    publish: { type: 'string' },
    'if-missing': { type: 'boolean' },
    json: { type: 'boolean' },
  });
  const dataDir = resolve(required(values.data, 'data'));
  const proposal = parseProposal(
    readJsonFile(resolve(required(values.proposal, 'proposal')), 'proposal', 'BAD_PROPOSAL'),
  );
  if (proposal.reshare)
    throw new QuorumFenceError(
      'BAD_PROPOSAL',
      'this proposal reshares an existing cluster (it has reshare terms): run "quorumfence reshare run" with it',
    );
  const nodeKey = loadNodeKeyFile(dataDir);
  const self = memberIndexOf(proposal, nodeKey.nodeKey, nodeKey.encryptionKey);
  if (values['if-missing'] && existsSync(join(dataDir, CLUSTER_FILE)) && existsSync(join(dataDir, REPLICA_KEY_FILE))) {
    const existing = readJsonFile(join(dataDir, CLUSTER_FILE), 'cluster description', 'BAD_CLUSTER') as {
      ceremony?: { proposal?: string };
    };
    if (existing.ceremony?.proposal === toHex(proposal.digest)) {
      if (values.publish && !existsSync(resolve(values.publish))) {
        writeFileDurably(resolve(values.publish), JSON.stringify(existing, null, 2) + '\n');
      }
      process.stderr.write(`dkg: ${dataDir} already holds this ceremony's key; nothing to do\n`);
      return 0;
    }
  }
  assertNoKeyYet(dataDir);
  // The new key's signing record is made here after the ceremony; one already here is not this key's.
  if (signingRecordExists(dataDir))
    throw new QuorumFenceError(
      'FILE_EXISTS',
      `${dataDir} already holds a signing record, of another key; a new key's replica starts from a new one ` +
        `(move it away, or take part with another --data)`,
    );
  // Before the ceremony, not after it: a link as --publish is refused while nothing is dealt yet.
  if (values.publish) refuseIrregularFile(resolve(values.publish));
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  recordAttempt(dataDir, proposal);
  const listen = values.listen ? parseListen(values.listen, 'listen', { host: '127.0.0.1', port: 0 }) : undefined;
  const transport = await openWebSocketTransport({ proposal, self, nodeKey, listen });
  const logger = ceremonyLogger(proposal, self);
  const prefix = `dkg member ${self}`;
  logger.info(
    { event: 'ceremony', kind: 'start', n: proposal.n, t: proposal.t },
    `${prefix}: ceremony ${toHex(proposal.ceremonyId).slice(0, 16)}…, n = ${proposal.n}, t = ${proposal.t}, listening for members`,
  );
  const progress = reportCeremonyProgress(logger, prefix);
  let outcome;
  try {
    outcome = await runCeremony({ proposal, nodeKey, self, transport, onEvent: progress.onEvent });
  } finally {
    progress.stop();
    await transport.close();
  }
  if (!outcome.ok) {
    if (values.json)
      process.stdout.write(JSON.stringify({ ok: false, reason: outcome.reason, members: outcome.members }) + '\n');
    throw new QuorumFenceError('CEREMONY_ABORTED', `ceremony aborted, nothing written: ${outcome.reason}`, {
      members: outcome.members,
    });
  }
  const {
    keyPath,
    clusterPath,
    summary: written,
  } = saveCeremonyResult(dataDir, proposal, self, outcome.result, values.publish);
  // The key has signed nothing yet: the one moment its replica's record is known to be new ("replica run --data").
  await createSigningRecord(dataDir, {
    clusterId: fromHex(outcome.result.cluster.clusterId, 32, 'clusterId'),
    replicaIndex: self,
  });
  const summary = {
    ...written,
    excluded: outcome.result.excluded,
    signatures: outcome.result.signatures.map((s) => s.index),
    elapsedMs: Math.round(outcome.elapsedMs),
  };
  if (values.json) process.stdout.write(JSON.stringify(summary) + '\n');
  else {
    process.stdout.write(
      `cluster ${summary.clusterId}\n  replica ${self} of ${proposal.n}, t = ${proposal.t}, qualified dealers ${summary.qualified.join(', ')}\n` +
        summary.excluded.map((e) => `  excluded dealer ${e.dealer}: ${e.reason}\n`).join('') +
        `  wrote ${keyPath} (secret, mode 0600)\n  wrote ${clusterPath} (public, signed by members ${summary.signatures.join(', ')})\n` +
        (values.publish ? `  wrote ${resolve(values.publish)} (public)\n` : ''),
    );
  }
  return 0;
}

/**
 * Writes a finished ceremony's result (the share 0600 and cluster.json in the data directory, and the public
 * copy to `publish` when given) and the summary both `dkg run` and `reshare run` print.
 */
export function saveCeremonyResult(
  dataDir: string,
  proposal: Proposal,
  self: number,
  result: CeremonyResult,
  publish: string | undefined,
) {
  if (publish) mkdirSync(dirname(resolve(publish)), { recursive: true });
  const { keyPath, clusterPath } = writeCeremonyOutput(
    dataDir,
    proposal,
    self,
    result,
    publish ? resolve(publish) : undefined,
  );
  const summary = {
    ok: true,
    clusterId: result.cluster.clusterId,
    groupPublicKey: result.cluster.groupPublicKey,
    index: self,
    qualified: result.qualified,
    key: keyPath,
    cluster: clusterPath,
  };
  return { keyPath, clusterPath, summary };
}
