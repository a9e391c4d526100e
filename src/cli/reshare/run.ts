/**
 * `quorumfence reshare run`: one party of the reshare ceremony. A new member (optionally dealing its old
 * share with --old-key) writes its new replica.key and cluster.json; an old member outside the new set (an
 * outside dealer of the proposal) deals its old share, answers complaints, and writes nothing.
 */
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { QuorumFenceError } from '../../common/errors.js';
import { bytesToBigInt, fromHex, toHex } from '../../common/bytes.js';
import { readJsonFile, refuseIrregularFile } from '../../common/files.js';
import { clusterToJson, loadClusterFile, type Cluster } from '../../cluster/description.js';
import { loadReplicaKeyFile, type ReplicaKeyJson } from '../../cluster/replica-key.js';
import { loadNodeKeyFile, nodeKeyExists } from '../../ceremony/node-key.js';
import { assertNoKeyYet } from '../../ceremony/output.js';
import { parseProposal, participantOf, type Proposal } from '../../ceremony/proposal.js';
import { resharing, unscaledShare, type OldSharing } from '../../ceremony/reshare.js';
import { runCeremony, runDealerOnly, type RunOptions } from '../../ceremony/runner.js';
import { openWebSocketTransport } from '../../ceremony/transport.js';
import { parseFlags, parseListen, required } from '../../command/args.js';
import { ceremonyLogger, recordAttempt, reportCeremonyProgress, saveCeremonyResult } from '../dkg.js';

export function oldSharingOf(cluster: Cluster): OldSharing {
  const json = clusterToJson(cluster);
  return {
    n: cluster.n,
    t: cluster.t,
    groupPublicKey: fromHex(json.groupPublicKey, 48, 'groupPublicKey'),
    scaledPublicShares: new Map(json.replicas.map((r) => [r.index, fromHex(r.publicKeyShare, 48, 'publicKeyShare')])),
  };
}

/**
 * The dealers the proposal names, once its terms are checked against the old cluster file: the same id
 * and membership version (so every member reshares the same cluster, or the digests differ and the
 * ceremony aborts), and dealers that are at least t_old of its replicas (outside dealers included).
 * @throws QuorumFenceError RESHARE_REFUSED
 */
export function dealersOf(proposal: Proposal, old: Cluster): readonly number[] {
  const terms = proposal.reshare;
  if (!terms)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      'the proposal has no reshare terms; make it with "quorumfence dkg propose ... --old-cluster FILE --dealers LIST"',
    );
  if (toHex(terms.oldClusterId) !== old.idHex || terms.oldMembershipVersion !== old.membershipVersion)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `the proposal reshares cluster ${toHex(terms.oldClusterId).slice(0, 16)}… membership ${terms.oldMembershipVersion}, ` +
        `but --old-cluster is ${old.idHex.slice(0, 16)}… membership ${old.membershipVersion}`,
    );
  const strangers = terms.dealers.filter((d) => d > old.n);
  if (strangers.length > 0)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `the proposal's dealers ${strangers.join(', ')} are not replicas of the old cluster (n = ${old.n})`,
    );
  if (terms.dealers.length < old.t)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `the proposal's dealers ${terms.dealers.join(', ')} are not at least t_old = ${old.t} of the old cluster's ${old.n} replicas`,
    );
  return terms.dealers;
}

/** This party's current (unscaled) share from its old key file, which must be old replica `index`'s. */
function currentShareFrom(path: string, old: Cluster, index: number, role: string): bigint {
  const key = loadReplicaKeyFile(path, old);
  if (key.index !== index)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `--old-key is replica ${key.index}'s, but this party is ${role}; a continuing member keeps its index`,
    );
  // loadReplicaKeyFile checked the file against the old cluster; the raw scalar is read from the same file.
  const json = readJsonFile(path, 'replica key', 'BAD_KEY_FILE') as ReplicaKeyJson;
  return unscaledShare(bytesToBigInt(fromHex(json.secretShare, 32, 'secretShare')), old.n);
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    proposal: { type: 'string' },
    'old-cluster': { type: 'string' },
    'old-key': { type: 'string' },
    'node-key-dir': { type: 'string' },
    listen: { type: 'string' },
    publish: { type: 'string' },
    json: { type: 'boolean' },
  });
  const dataDir = resolve(required(values.data, 'data'));
  const proposal = parseProposal(
    readJsonFile(resolve(required(values.proposal, 'proposal')), 'proposal', 'BAD_PROPOSAL'),
  );
  const old = loadClusterFile(resolve(required(values['old-cluster'], 'old-cluster')));
  const dealers = dealersOf(proposal, old);
  const nodeKeyDir = resolve(values['node-key-dir'] ?? dataDir);
  if (!nodeKeyExists(nodeKeyDir))
    throw new QuorumFenceError('BAD_PROPOSAL', `no node key in ${nodeKeyDir}; run "quorumfence replica init" first`);
  const nodeKey = loadNodeKeyFile(nodeKeyDir);
  const self = participantOf(proposal, nodeKey.nodeKey, nodeKey.encryptionKey);
  const me = proposal.participants[self - 1]!;
  const oldKeyPath = values['old-key'] ? resolve(values['old-key']) : undefined;
  let currentShare: bigint | undefined;
  if (me.receives) {
    if (oldKeyPath) currentShare = currentShareFrom(oldKeyPath, old, self, `index ${self} of the proposal`);
    if (me.dealer !== undefined && currentShare === undefined)
      throw new QuorumFenceError(
        'RESHARE_REFUSED',
        `member ${self} deals (the proposal names it a dealer) but no --old-key was given`,
      );
  } else {
    // An outside dealer: an old member leaving the set. It deals its old share and keeps nothing new.
    if (!oldKeyPath)
      throw new QuorumFenceError(
        'RESHARE_REFUSED',
        `this node key is the proposal's outside dealer for old replica ${me.dealer}: it deals, so give its --old-key`,
      );
    if (values.publish !== undefined)
      throw new QuorumFenceError('INVALID_OPTION', '--publish: an outside dealer writes no cluster.json');
    currentShare = currentShareFrom(oldKeyPath, old, me.dealer!, `the outside dealer for old replica ${me.dealer}`);
  }
  const rule = resharing(oldSharingOf(old), dealers, me.dealer !== undefined ? currentShare : undefined);
  if (me.receives) assertNoKeyYet(dataDir);
  // Before the ceremony: a link as --publish is refused while nothing is dealt yet.
  if (values.publish !== undefined) refuseIrregularFile(resolve(values.publish));
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  recordAttempt(dataDir, proposal);
  const listen = values.listen ? parseListen(values.listen, 'listen', { host: '127.0.0.1', port: 0 }) : undefined;
  const transport = await openWebSocketTransport({ proposal, self, nodeKey, listen });
  const name = me.receives ? `member ${self}` : `dealer ${self} (old replica ${me.dealer}, deals only)`;
  const logger = ceremonyLogger(proposal, self);
  const prefix = `reshare ${name}`;
  const outside = proposal.participants.filter((p) => !p.receives);
  logger.info(
    { event: 'ceremony', kind: 'start', n: proposal.n, t: proposal.t, reshareOf: old.idHex, dealers },
    `${prefix}: reshare of cluster ${old.idHex.slice(0, 16)}… (n = ${old.n}, t = ${old.t}) to n = ${proposal.n}, t = ${proposal.t}; ` +
      `dealers ${dealers.join(', ')}` +
      (outside.length > 0
        ? `; participants 1..${proposal.n} are the new members, ${outside.map((p) => `${p.sender} = old replica ${p.dealer}`).join(', ')} deal only`
        : ''),
  );
  const progress = reportCeremonyProgress(logger, prefix);
  const options: RunOptions = { proposal, nodeKey, self, transport, rule, onEvent: progress.onEvent };
  try {
    if (!me.receives) return await dealOnly(options, old, me.dealer!, values.json === true);
    return await receive(options, old, dataDir, values.publish, values.json === true);
  } finally {
    progress.stop();
    await transport.close();
  }
}

/** A new member's end: the new share and description, with the group key unchanged. */
async function receive(
  options: RunOptions,
  old: Cluster,
  dataDir: string,
  publish: string | undefined,
  json: boolean,
): Promise<number> {
  const { proposal, self } = options;
  const outcome = await runCeremony(options);
  if (!outcome.ok)
    throw new QuorumFenceError('CEREMONY_ABORTED', `reshare aborted, nothing written: ${outcome.reason}`, {
      members: outcome.members,
    });
  if (outcome.result.cluster.groupPublicKey !== clusterToJson(old).groupPublicKey)
    throw new QuorumFenceError('RESHARE_REFUSED', 'the reshare produced another group key; nothing written');
  // The new membership is the old one's plus 1, so "reshare follow" can tell it is newer once endorsed.
  const result = {
    ...outcome.result,
    cluster: { ...outcome.result.cluster, membershipVersion: proposal.reshare!.oldMembershipVersion + 1 },
  };
  const { keyPath, clusterPath, summary } = saveCeremonyResult(dataDir, proposal, self, result, publish);
  if (json) process.stdout.write(JSON.stringify({ ...summary, role: 'member' }) + '\n');
  else
    process.stdout.write(
      `group key unchanged: ${summary.groupPublicKey.slice(0, 16)}…\n  replica ${self} of ${proposal.n}, t = ${proposal.t}, from dealers ${summary.qualified.join(', ')}\n  wrote ${keyPath}\n  wrote ${clusterPath}\n`,
    );
  return 0;
}

/** An outside dealer's end: t_new members confirmed one result; nothing is written. */
async function dealOnly(options: RunOptions, old: Cluster, oldIndex: number, json: boolean): Promise<number> {
  const outcome = await runDealerOnly(options);
  if (!outcome.ok)
    throw new QuorumFenceError('CEREMONY_ABORTED', `reshare aborted: ${outcome.reason}`, {
      members: outcome.members,
    });
  const { dealt } = outcome;
  const used = dealt.qualified.includes(oldIndex);
  if (json)
    process.stdout.write(
      JSON.stringify({ ok: true, role: 'dealer-only', oldIndex, ...dealt, dealtShareUsed: used }) + '\n',
    );
  else
    process.stdout.write(
      `dealt old replica ${oldIndex}'s share of cluster ${old.idHex.slice(0, 16)}… (membership ${old.membershipVersion})\n` +
        `  members ${dealt.confirmedBy.join(', ')} confirmed cluster ${dealt.clusterId.slice(0, 16)}…, qualified dealers ${dealt.qualified.join(', ')}` +
        (used ? '' : ` (this deal was not among them)`) +
        `\n  wrote nothing: this replica is not in the new set; retire its old key once the new set serves\n`,
    );
  return 0;
}
