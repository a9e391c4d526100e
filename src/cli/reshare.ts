/**
 * `quorumfence reshare freeze|inherit|run`: moving the cluster's key to a new
 * set of shares (replace a replica, add or remove replicas, refresh every
 * share) without changing the group key. The order, for each old replica:
 * stop it, `freeze` (it signs nothing more) and export; then each new member
 * `run`s the reshare ceremony and `inherit`s the frozen records of at least
 * 2f_old+1 old replicas before it starts. docs/resharing.md has the argument.
 */
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { bytesToBigInt, fromHex } from '../common/bytes.js';
import { readJsonFile, writeFileDurably } from '../common/files.js';
import { clusterToJson, loadClusterFile, type Cluster } from '../cluster/description.js';
import { loadReplicaKeyFile, type ReplicaKeyJson } from '../cluster/replica-key.js';
import { loadNodeKeyFile, nodeKeyExists } from '../ceremony/node-key.js';
import { assertNoKeyYet } from '../ceremony/output.js';
import { memberIndexOf, parseProposal } from '../ceremony/proposal.js';
import { resharing, unscaledShare, type OldSharing } from '../ceremony/reshare.js';
import { runCeremony } from '../ceremony/runner.js';
import { openWebSocketTransport } from '../ceremony/transport.js';
import { inheritRecords, type OldRecordReport } from '../replica/inherit.js';
import { exportInterchange, parseInterchange } from '../replica/interchange.js';
import { SigningRecord } from '../replica/signing-record.js';
import { parseFlags, parseListen, required, runSubcommand, type Command } from '../command/args.js';
import { describeEvent, recordAttempt, saveCeremonyResult } from './dkg.js';

const usage = `usage: quorumfence reshare freeze --data DIR [--out FILE] [--reason TEXT]
       quorumfence reshare run --data DIR --proposal FILE --old-cluster FILE --dealers LIST
                               [--old-key FILE] [--node-key-dir DIR] [--listen HOST:PORT] [--publish FILE] [--json]
       quorumfence reshare inherit --data DIR --key FILE --cluster FILE --old-cluster FILE --in FILE --in FILE ...

Gives the cluster's key new shares while the group key stays the same:
replace one replica (its share may be lost), add replicas (4 -> 7), remove
replicas (7 -> 4), or refresh every share with the same members. Each old
member deals its current share to the new members; each new member's share is
interpolated from t_old checked deals. The proposal is made with
"quorumfence dkg propose" from the NEW members' cards (a continuing member
keeps its index). See docs/resharing.md for the steps and the safety argument.

freeze: on a STOPPED old replica, durably freeze its signing record (it refuses
every grant from then on, with REPLICA_FROZEN) and export it, like
"replica export", to --out FILE or stdout. Run it before the reshare.
  --data DIR               the old replica's data directory                      (required)
  --out FILE               where to write the frozen record (default: stdout)
  --reason TEXT            kept in the freeze marker (default "reshare")

run: take part in the reshare ceremony as a new member, or as an old member
that deals (--old-key). Progress on stderr. Writes the new replica.key and
cluster.json into --data, which must not hold a key yet.
  --data DIR               the new generation's data directory                   (required)
  --proposal FILE          the reshare proposal (new members, dkg propose)       (required)
  --old-cluster FILE       the cluster being reshared                             (required)
  --dealers LIST           old replica indices that deal, e.g. 1,2,3 (>= t_old)   (required)
  --old-key FILE           this member's old key file: it deals its share
  --node-key-dir DIR       where its node key is (default: --data)
  --listen HOST:PORT       where the ceremony listens (default: its proposal endpoint)
  --publish FILE           also write the public cluster.json here
  --json                   print the result as one JSON line

inherit: before a new replica first starts, raise its signing record from the
frozen records of at least 2f_old+1 old replicas, keeping the largest epoch
per resource (a top epoch reported with two holders is blocked for everyone).
  --data DIR               the new replica's signing record ("replica run --data") (required)
  --key FILE               the new replica's key file (from "reshare run")        (required)
  --cluster FILE           the new cluster.json                                  (required)
  --old-cluster FILE       the old cluster.json                                  (required)
  --in FILE                a frozen record from "reshare freeze"; repeat it       (required, >= 2f_old+1)`;

export const command: Command = {
  summary: 'new shares of the same key: replace, add, remove replicas or refresh shares',
  usage,
  run: (argv) => runSubcommand(argv, { freeze, run, inherit }),
};

async function freeze(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    out: { type: 'string' },
    reason: { type: 'string' },
  });
  const dataDir = resolve(required(values.data, 'data'));
  const peek = SigningRecord.open(dataDir, undefined, { readOnly: true });
  const identity = peek.identity;
  await peek.close();
  // A writable open takes the store's lock: a running replica makes this fail with STORE_LOCKED.
  const store = SigningRecord.open(dataDir, identity);
  let text: string;
  try {
    const state = await store.freeze(values.reason ?? 'reshare');
    process.stderr.write(`reshare: replica ${identity.replicaIndex} frozen at ${state.at}; it signs nothing more\n`);
    text = JSON.stringify(exportInterchange(store), null, 2) + '\n';
  } finally {
    await store.close();
  }
  if (values.out) writeFileDurably(resolve(values.out), text, { mode: 0o600 });
  else process.stdout.write(text);
  return 0;
}

function oldSharingOf(cluster: Cluster): OldSharing {
  const json = clusterToJson(cluster);
  return {
    n: cluster.n,
    t: cluster.t,
    groupPublicKey: fromHex(json.groupPublicKey, 48, 'groupPublicKey'),
    scaledPublicShares: new Map(json.replicas.map((r) => [r.index, fromHex(r.publicKeyShare, 48, 'publicKeyShare')])),
  };
}

function parseDealers(text: string, old: Cluster): number[] {
  const dealers = text.split(',').map((s) => Number(s.trim()));
  if (dealers.some((d) => !Number.isInteger(d) || d < 1 || d > old.n))
    throw new QuorumFenceError('INVALID_OPTION', `--dealers: expected old replica indices 1..${old.n}, got "${text}"`);
  if (new Set(dealers).size < old.t)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `--dealers: at least t_old = ${old.t} distinct old replicas must deal`,
    );
  return dealers;
}

async function run(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    proposal: { type: 'string' },
    'old-cluster': { type: 'string' },
    'old-key': { type: 'string' },
    'node-key-dir': { type: 'string' },
    dealers: { type: 'string' },
    listen: { type: 'string' },
    publish: { type: 'string' },
    json: { type: 'boolean' },
  });
  const dataDir = resolve(required(values.data, 'data'));
  const proposal = parseProposal(
    readJsonFile(resolve(required(values.proposal, 'proposal')), 'proposal', 'BAD_PROPOSAL'),
  );
  const old = loadClusterFile(resolve(required(values['old-cluster'], 'old-cluster')));
  const dealers = parseDealers(required(values.dealers, 'dealers'), old);
  const nodeKeyDir = resolve(values['node-key-dir'] ?? dataDir);
  if (!nodeKeyExists(nodeKeyDir))
    throw new QuorumFenceError('BAD_PROPOSAL', `no node key in ${nodeKeyDir}; run "quorumfence replica init" first`);
  const nodeKey = loadNodeKeyFile(nodeKeyDir);
  const self = memberIndexOf(proposal, nodeKey.nodeKey, nodeKey.encryptionKey);
  let currentShare: bigint | undefined;
  if (values['old-key']) {
    const keyPath = resolve(values['old-key']);
    const key = loadReplicaKeyFile(keyPath, old);
    if (key.index !== self)
      throw new QuorumFenceError(
        'RESHARE_REFUSED',
        `--old-key is replica ${key.index}'s, but this member is index ${self} of the proposal; a continuing member keeps its index`,
      );
    // loadReplicaKeyFile checked the file against the old cluster; the raw scalar is read from the same file.
    const json = readJsonFile(keyPath, 'replica key', 'BAD_KEY_FILE') as ReplicaKeyJson;
    currentShare = unscaledShare(bytesToBigInt(fromHex(json.secretShare, 32, 'secretShare')), old.n);
  }
  if (dealers.includes(self) && currentShare === undefined)
    throw new QuorumFenceError('RESHARE_REFUSED', `member ${self} is named in --dealers but no --old-key was given`);
  const rule = resharing(oldSharingOf(old), dealers, dealers.includes(self) ? currentShare : undefined);
  assertNoKeyYet(dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  recordAttempt(dataDir, proposal);
  const listen = values.listen ? parseListen(values.listen, 'listen', { host: '127.0.0.1', port: 0 }) : undefined;
  const transport = await openWebSocketTransport({ proposal, self, listen });
  const log = (line: string) => process.stderr.write(`reshare member ${self}: ${line}\n`);
  log(
    `reshare of cluster ${old.idHex.slice(0, 16)}… (n = ${old.n}, t = ${old.t}) to n = ${proposal.n}, t = ${proposal.t}; dealers ${dealers.join(', ')}`,
  );
  let outcome;
  try {
    outcome = await runCeremony({
      proposal,
      nodeKey,
      self,
      transport,
      rule,
      onEvent: (event) => {
        const line = describeEvent(event);
        if (line && event.kind !== 'refused') log(line);
      },
    });
  } finally {
    await transport.close();
  }
  if (!outcome.ok)
    throw new QuorumFenceError('CEREMONY_ABORTED', `reshare aborted, nothing written: ${outcome.reason}`, {
      members: outcome.members,
    });
  if (outcome.result.cluster.groupPublicKey !== clusterToJson(old).groupPublicKey)
    throw new QuorumFenceError('RESHARE_REFUSED', 'the reshare produced another group key; nothing written');
  const { keyPath, clusterPath, summary } = saveCeremonyResult(dataDir, proposal, self, outcome.result, values.publish);
  if (values.json) process.stdout.write(JSON.stringify(summary) + '\n');
  else
    process.stdout.write(
      `group key unchanged: ${summary.groupPublicKey.slice(0, 16)}…\n  replica ${self} of ${proposal.n}, t = ${proposal.t}, from dealers ${summary.qualified.join(', ')}\n  wrote ${keyPath}\n  wrote ${clusterPath}\n`,
    );
  return 0;
}

async function inherit(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    cluster: { type: 'string' },
    'old-cluster': { type: 'string' },
    key: { type: 'string' },
    in: { type: 'string', multiple: true },
  });
  const cluster = loadClusterFile(resolve(required(values.cluster, 'cluster')));
  const old = loadClusterFile(resolve(required(values['old-cluster'], 'old-cluster')));
  if (clusterToJson(cluster).groupPublicKey !== clusterToJson(old).groupPublicKey)
    throw new QuorumFenceError('RESHARE_REFUSED', '--cluster and --old-cluster have different group keys');
  const reports: OldRecordReport[] = (values.in ?? []).map((path) => {
    const parsed = parseInterchange(readJsonFile(resolve(path), 'frozen record', 'BAD_INTERCHANGE'), old.id);
    if (parsed.replica > old.n)
      throw new QuorumFenceError('BAD_INTERCHANGE', `${path}: replica ${parsed.replica} is not in the old cluster`);
    return { replica: parsed.replica, floor: parsed.floor, entries: parsed.entries };
  });
  const inherited = inheritRecords(reports, old.f, cluster.id);
  const dataDir = resolve(required(values.data, 'data'));
  const replicaIndex = loadReplicaKeyFile(resolve(required(values.key, 'key')), cluster).index;
  const store = SigningRecord.open(dataDir, { clusterId: cluster.id, replicaIndex });
  try {
    const summary = await store.raiseFrom(inherited.entries, inherited.floor);
    process.stderr.write(
      `reshare: replica ${replicaIndex} inherited the records of old replicas ${inherited.from.join(', ')}: ${summary.raised} resource(s)` +
        (inherited.contested.length > 0
          ? `, ${inherited.contested.length} top epoch(s) blocked (holders disagreed)`
          : '') +
        '\n',
    );
  } finally {
    await store.close();
  }
  return 0;
}
