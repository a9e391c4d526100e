/**
 * `quorumfence reshare freeze|inherit|run`: moving the cluster's key to a new
 * set of shares (replace a replica, add or remove replicas, refresh every
 * share) without changing the group key. The order, for each old replica:
 * stop it, `freeze` (it signs nothing more) and export; then each new member
 * `run`s the reshare ceremony and `inherit`s the frozen records of at least
 * 2f_old+1 old replicas before it starts. docs/resharing.md has the argument.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { bytesToBigInt, fromHex, toHex } from '../common/bytes.js';
import { readJsonFile, syncDirectory, writeFileDurably } from '../common/files.js';
import { clusterToJson, loadClusterFile, parseCluster, type Cluster } from '../cluster/description.js';
import {
  combineEndorsement,
  followMembership,
  membershipDigest,
  signMembership,
  type MembershipPartial,
} from '../cluster/membership.js';
import { loadReplicaKeyFile, type ReplicaKeyJson } from '../cluster/replica-key.js';
import { loadNodeKeyFile, nodeKeyExists } from '../ceremony/node-key.js';
import { assertNoKeyYet } from '../ceremony/output.js';
import { memberIndexOf, parseProposal, type Proposal } from '../ceremony/proposal.js';
import { resharing, unscaledShare, type OldSharing } from '../ceremony/reshare.js';
import { runCeremony } from '../ceremony/runner.js';
import { openWebSocketTransport } from '../ceremony/transport.js';
import { inheritRecords, type OldRecordReport } from '../replica/inherit.js';
import { exportInterchange, parseInterchange } from '../replica/interchange.js';
import { SigningRecord } from '../replica/signing-record.js';
import { integerFlag, parseFlags, parseListen, required, runSubcommand, type Command } from '../command/args.js';
import { OPERATOR_SECRET_ENV, readOperatorSecret } from '../common/operator-secret.js';
import { describeEvent, recordAttempt, saveCeremonyResult } from './dkg.js';

const usage = `usage: quorumfence reshare freeze --data DIR [--out FILE] [--reason TEXT]
       quorumfence reshare freeze --url URL --secret-file FILE [--reason TEXT] [--timeout-ms N]
              quorumfence reshare run --data DIR --proposal FILE --old-cluster FILE

                               [--old-key FILE] [--node-key-dir DIR] [--listen HOST:PORT] [--publish FILE] [--json]
       quorumfence reshare inherit --data DIR --key FILE --cluster FILE --old-cluster FILE --in FILE --in FILE ...
       quorumfence reshare endorse --cluster FILE --key FILE [--out FILE]
       quorumfence reshare endorse --cluster FILE --partial FILE --partial FILE ... [--out FILE]
              quorumfence reshare follow --cluster FILE --candidate FILE [--out FILE]
       quorumfence reshare retire --old-key FILE --old-cluster FILE --key FILE --cluster FILE


Gives the cluster's key new shares while the group key stays the same:
replace one replica (its share may be lost), add replicas (4 -> 7), remove
replicas (7 -> 4), or refresh every share with the same members. Each old
member deals its current share to the new members; each new member's share is
interpolated from t_old checked deals. The proposal is made with
"quorumfence dkg propose --old-cluster FILE --dealers LIST" from the NEW
members' cards (a continuing member keeps its index): the old cluster's id and
membership version and the dealers are part of its digest, so every member
reshares the same cluster from the same dealers, or the ceremony aborts. See docs/resharing.md for the steps and the safety argument.

freeze: durably freeze an old replica's signing record (it refuses every
request from then on, with REPLICA_FROZEN, also after a restart). Run it before
the reshare. With --data, on a STOPPED replica, and export the record, like
"replica export", to --out FILE or stdout. With --url, on a RUNNING replica
started with --operator-secret-file: POST /admin/freeze, which answers once
the marker is flushed (no grant is in flight past it); then export with
"replica export --data DIR" (read-only, beside the running replica).
  --data DIR               the stopped replica's data directory
  --out FILE               with --data: where to write the frozen record (default: stdout)
  --url URL                the running replica's endpoint (ws://, wss://) or http(s) address
  --secret-file FILE       with --url: its operator secret (or $QUORUMFENCE_OPERATOR_SECRET)
  --timeout-ms N           with --url: how long to wait for the answer (default 30000)
  --reason TEXT            kept in the freeze marker (default "reshare")

run: take part in the reshare ceremony as a new member, or as an old member
that deals (--old-key). Progress on stderr. Writes the new replica.key and
cluster.json into --data, which must not hold a key yet.
  --data DIR               the new generation's data directory                   (required)
  --proposal FILE          the reshare proposal (new members, dkg propose)       (required)
    --old-cluster FILE       the cluster being reshared (the proposal names its id)  (required)

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
  --in FILE                a frozen record from "reshare freeze"; repeat it       (required, >= 2f_old+1)

endorse: sign the new membership with the group key, so holders of an older
cluster.json can follow it ("reshare follow"). With --key, one NEW member signs
the new cluster.json with its new share and writes its partial (public). With
--partial, t_new partials are checked and combined, and the new cluster.json
is written with its "endorsement". No share file leaves its member.
  --cluster FILE           the NEW cluster.json (from "reshare run")             (required)
  --key FILE               this new member's key file: write its partial
  --partial FILE           a partial from "endorse --key"; repeat it (>= t_new)
  --out FILE               where to write (default: stdout)

follow: accept a newer membership of the cluster only if it has the same
cluster id, a higher membershipVersion, and an endorsement that verifies under
the group key; then write it to --out. Refusals: CLUSTER_MISMATCH,
MEMBERSHIP_NOT_NEWER, MEMBERSHIP_NOT_ENDORSED, BAD_CLUSTER.
  --cluster FILE           the cluster.json held now                             (required)
  --candidate FILE         the newer cluster.json offered                         (required)
  --out FILE               where to write the followed description (default: only check)

retire: after the reshare, once the new replica runs, erase this member's OLD
key file (overwritten with zeros, flushed, then removed), so its old share
cannot join t-1 others to sign again. It first checks that the old key is a
share of the old cluster and the new key a share of the new one at the same
index, both clusters have the same group key and the new membership is newer;
otherwise it refuses (RESHARE_REFUSED) and erases nothing.
  --old-key FILE           the old key file to erase                              (required)
  --old-cluster FILE       the old cluster.json                                   (required)
  --key FILE               this member's NEW key file (kept)                      (required)
  --cluster FILE           the NEW cluster.json                                   (required)`;

export const command: Command = {
  summary: 'new shares of the same key: replace, add, remove replicas or refresh shares',
  usage,
  run: (argv) => runSubcommand(argv, { freeze, run, inherit, endorse, follow, retire }),
};

async function freeze(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    out: { type: 'string' },
    reason: { type: 'string' },
    url: { type: 'string' },
    'secret-file': { type: 'string' },
    'timeout-ms': { type: 'string' },
  });
  if ((values.url === undefined) === (values.data === undefined))
    throw new QuorumFenceError('INVALID_OPTION', 'freeze: give --data (a stopped replica) or --url (a running one)');
  if (values.url !== undefined) {
    if (values.out !== undefined)
      throw new QuorumFenceError(
        'INVALID_OPTION',
        '--out goes with --data; after a live freeze, export with "quorumfence replica export --data DIR"',
      );
    return freezeLive(values.url, values['secret-file'], values.reason ?? 'reshare', values['timeout-ms']);
  }
  const dataDir = resolve(values.data!);
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

/** The admin url of a replica given by its endpoint (ws://, wss://) or its http(s) address. */
function adminFreezeUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new QuorumFenceError('INVALID_OPTION', `--url: not a URL: ${JSON.stringify(text.slice(0, 100))}`);
  }
  const scheme = { 'ws:': 'http:', 'wss:': 'https:', 'http:': 'http:', 'https:': 'https:' }[url.protocol];
  if (!scheme)
    throw new QuorumFenceError('INVALID_OPTION', `--url: expected ws, wss, http or https, got ${url.protocol}`);
  return new URL(`${scheme}//${url.host}/admin/freeze`);
}

/** POST /admin/freeze to a running replica; succeeds only once the replica has flushed its freeze marker. */
async function freezeLive(
  urlText: string,
  secretFile: string | undefined,
  reason: string,
  timeoutText: string | undefined,
): Promise<number> {
  const url = adminFreezeUrl(urlText);
  const secret = readOperatorSecret(secretFile, 'secret-file');
  if (secret === undefined)
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `--secret-file (or $${OPERATOR_SECRET_ENV}) is required with --url: the replica's operator secret`,
    );
  const timeoutMs = integerFlag(timeoutText, 'timeout-ms', 30_000, 1, 600_000);
  let response: Response;
  try {
    response = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reason }),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (error) {
    const timedOut = (error as Error).name === 'TimeoutError';
    throw new QuorumFenceError(
      timedOut ? 'TIMEOUT' : 'CONNECTION_FAILED',
      `${url.href}: ${timedOut ? `no answer within ${timeoutMs} ms; the freeze may or may not be recorded, ask again` : (error as Error).message}`,
    );
  }
  const body = (await response.json().catch(() => ({}))) as Record<string, unknown>;
  if (response.status !== 200) {
    const code =
      response.status === 401 ? 'UNAUTHENTICATED' : response.status === 500 ? 'INTERNAL' : 'INVALID_ARGUMENT';
    throw new QuorumFenceError(
      code,
      `${url.href} refused the freeze (HTTP ${response.status}): ${String(body.message)}`,
    );
  }
  process.stderr.write(
    `reshare: replica ${String(body.replica)} frozen at ${String(body.at)} while running; it signs nothing more. ` +
      `Export its record with "quorumfence replica export --data DIR" (read-only, beside the running replica).\n`,
  );
  process.stdout.write(JSON.stringify(body) + '\n');
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

/**
 * The dealers the proposal names, once its terms are checked against the old cluster file: the same id
 * and membership version (so every member reshares the same cluster, or the digests differ and the
 * ceremony aborts), and dealers that are at least t_old of its replicas.
 * @throws QuorumFenceError RESHARE_REFUSED
 */
function dealersOf(proposal: Proposal, old: Cluster): readonly number[] {
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
  if (terms.dealers.some((d) => d > old.n) || terms.dealers.length < old.t)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `the proposal's dealers ${terms.dealers.join(', ')} are not at least t_old = ${old.t} of the old cluster's ${old.n} replicas`,
    );
  return terms.dealers;
}

async function run(argv: string[]): Promise<number> {
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
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `member ${self} deals (the proposal names it a dealer) but no --old-key was given`,
    );
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
  // The new membership is the old one's plus 1, so "reshare follow" can tell it is newer once endorsed.
  const result = {
    ...outcome.result,
    cluster: { ...outcome.result.cluster, membershipVersion: proposal.reshare!.oldMembershipVersion + 1 },
  };
  const { keyPath, clusterPath, summary } = saveCeremonyResult(dataDir, proposal, self, result, values.publish);
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

export const MEMBERSHIP_PARTIAL_FORMAT = 'quorumfence/membership-partial/v1';

/** Writes `text` to --out (durably), or to stdout without one. */
function output(out: string | undefined, text: string): void {
  if (out) writeFileDurably(resolve(out), text);
  else process.stdout.write(text);
}

function readPartial(path: string, cluster: Cluster): MembershipPartial {
  const json = readJsonFile(path, 'membership partial', 'BAD_CLUSTER') as Record<string, unknown>;
  if (typeof json !== 'object' || json === null || json.format !== MEMBERSHIP_PARTIAL_FORMAT)
    throw new QuorumFenceError('UNKNOWN_VERSION', `${path}: expected a "${MEMBERSHIP_PARTIAL_FORMAT}" file`);
  if (json.clusterId !== cluster.idHex || json.digest !== toHex(membershipDigest(cluster)))
    throw new QuorumFenceError(
      'MEMBERSHIP_NOT_ENDORSED',
      `${path}: signs another membership (membership ${String(json.membershipVersion)}, digest ${String(json.digest).slice(0, 16)}…), not this cluster.json's`,
    );
  if (typeof json.index !== 'number')
    throw new QuorumFenceError('BAD_CLUSTER', `${path}: "index" expected a member index`);
  let signature;
  try {
    signature = cluster.backend.decodeSignature(fromHex(json.signature, 96, 'signature'), 'signature');
  } catch (error) {
    throw new QuorumFenceError('BAD_CLUSTER', `${path}: ${(error as Error).message}`, undefined, { cause: error });
  }
  return { index: json.index, signature };
}

async function endorse(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    cluster: { type: 'string' },
    key: { type: 'string' },
    partial: { type: 'string', multiple: true },
    out: { type: 'string' },
  });
  const clusterPath = resolve(required(values.cluster, 'cluster'));
  const raw = readJsonFile(clusterPath, 'cluster description', 'BAD_CLUSTER') as Record<string, unknown>;
  const cluster = parseCluster(raw);
  const partials = values.partial ?? [];
  if ((values.key === undefined) === (partials.length === 0))
    throw new QuorumFenceError('INVALID_OPTION', 'endorse: give either --key (sign) or --partial (combine), not both');
  if (values.key !== undefined) {
    const key = loadReplicaKeyFile(resolve(values.key), cluster);
    const partial = signMembership(cluster, key.index, key.secretKey);
    const json = {
      format: MEMBERSHIP_PARTIAL_FORMAT,
      clusterId: cluster.idHex,
      membershipVersion: cluster.membershipVersion,
      digest: toHex(membershipDigest(cluster)),
      index: partial.index,
      signature: toHex(partial.signature.bytes),
    };
    output(values.out, JSON.stringify(json, null, 2) + '\n');
    process.stderr.write(
      `reshare: member ${key.index} signed membership ${cluster.membershipVersion} of cluster ${cluster.idHex.slice(0, 16)}…\n`,
    );
    return 0;
  }
  const signature = combineEndorsement(
    cluster,
    partials.map((path) => readPartial(resolve(path), cluster)),
  );
  // The file as given (a ceremony's cluster.json keeps its ceremony block), with the endorsement added.
  output(values.out, JSON.stringify({ ...raw, endorsement: toHex(signature.bytes) }, null, 2) + '\n');
  process.stderr.write(
    `reshare: membership ${cluster.membershipVersion} of cluster ${cluster.idHex.slice(0, 16)}… endorsed by the group key\n`,
  );
  return 0;
}

async function follow(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    cluster: { type: 'string' },
    candidate: { type: 'string' },
    out: { type: 'string' },
  });
  const current = loadClusterFile(resolve(required(values.cluster, 'cluster')));
  const candidatePath = resolve(required(values.candidate, 'candidate'));
  const raw = readJsonFile(candidatePath, 'cluster description', 'BAD_CLUSTER');
  const outcome = followMembership(current, raw);
  if (!outcome.ok) throw new QuorumFenceError(outcome.code, `not following ${candidatePath}: ${outcome.message}`);
  if (values.out) writeFileDurably(resolve(values.out), JSON.stringify(raw, null, 2) + '\n');
  process.stdout.write(
    `following membership ${outcome.cluster.membershipVersion} of cluster ${current.idHex.slice(0, 16)}… ` +
      `(was ${current.membershipVersion}): n = ${outcome.cluster.n}, t = ${outcome.cluster.t}, endorsed by the group key` +
      (values.out ? `\n  wrote ${resolve(values.out)}` : '') +
      '\n',
  );
  return 0;
}

async function retire(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    'old-key': { type: 'string' },
    'old-cluster': { type: 'string' },
    key: { type: 'string' },
    cluster: { type: 'string' },
  });
  const oldKeyPath = resolve(required(values['old-key'], 'old-key'));
  const old = loadClusterFile(resolve(required(values['old-cluster'], 'old-cluster')));
  const next = loadClusterFile(resolve(required(values.cluster, 'cluster')));
  const newKeyPath = resolve(required(values.key, 'key'));
  if (clusterToJson(next).groupPublicKey !== clusterToJson(old).groupPublicKey)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      '--cluster and --old-cluster have different group keys; nothing erased',
    );
  if (next.membershipVersion <= old.membershipVersion)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `--cluster is membership ${next.membershipVersion}, not newer than --old-cluster (${old.membershipVersion}); nothing erased`,
    );
  if (resolve(newKeyPath) === oldKeyPath)
    throw new QuorumFenceError('RESHARE_REFUSED', '--key and --old-key are the same file; nothing erased');
  const refuse = (what: string, error: unknown): never => {
    throw new QuorumFenceError('RESHARE_REFUSED', `${what}: ${(error as Error).message}; nothing erased`, undefined, {
      cause: error,
    });
  };
  // Both keys must be what they claim: a working new share, and an old share of the old cluster.
  let oldIndex = 0;
  let newIndex = 0;
  try {
    newIndex = loadReplicaKeyFile(newKeyPath, next).index;
  } catch (error) {
    refuse(`--key is not a share of --cluster`, error);
  }
  try {
    oldIndex = loadReplicaKeyFile(oldKeyPath, old).index;
  } catch (error) {
    refuse(`--old-key is not a share of --old-cluster`, error);
  }
  // A continuing member keeps its index (reshare run enforces it): another index means a mixed-up pair of files.
  if (newIndex !== oldIndex)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `--old-key is replica ${oldIndex}'s, --key replica ${newIndex}'s; a member keeps its index; nothing erased`,
    );
  eraseFile(oldKeyPath);
  process.stderr.write(
    `reshare: erased old replica ${oldIndex}'s share (${oldKeyPath}) of membership ${old.membershipVersion}; ` +
      `the new share (${newKeyPath}) of membership ${next.membershipVersion} is kept\n`,
  );
  return 0;
}

/** Overwrites a small file with zeros, flushes it, removes it, and flushes its directory. */
function eraseFile(path: string): void {
  try {
    const size = statSync(path).size;
    const fd = openSync(path, 'r+');
    try {
      writeSync(fd, new Uint8Array(size));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    unlinkSync(path);
    syncDirectory(dirname(path));
  } catch (error) {
    throw new QuorumFenceError(
      'IO_ERROR',
      `cannot erase ${path}: ${(error as Error).message}`,
      { path },
      { cause: error },
    );
  }
}
