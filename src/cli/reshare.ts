/**
 * `quorumfence reshare freeze|run|inherit|endorse|follow|retire`: moving the
 * cluster's key to a new set of shares (replace a replica, add or remove
 * replicas, refresh every share) without changing the group key. The order,
 * for each old replica: `freeze` (it signs nothing more) and a signed export;
 * then every party `run`s the reshare ceremony (new members, and old members
 * leaving the set as outside dealers) and each new member `inherit`s the signed
 * frozen exports of at least 2f_old+1 old replicas before it starts. docs/resharing.md has the
 * argument. One file per verb in src/cli/reshare/.
 */
import { runSubcommand, type Command } from '../command/args.js';
import { endorse } from './reshare/endorse.js';
import { follow } from './reshare/follow.js';
import { freeze } from './reshare/freeze.js';
import { inherit } from './reshare/inherit.js';
import { retire } from './reshare/retire.js';
import { run } from './reshare/run.js';

// Exported here before the verbs moved to their own files; kept for importers of this module.
export { MEMBERSHIP_PARTIAL_FORMAT } from './reshare/endorse.js';

const usage = `usage: quorumfence reshare freeze --data DIR --key FILE --cluster FILE [--out FILE] [--reason TEXT]
       quorumfence reshare freeze --url URL --secret-file FILE [--ca FILE] [--reason TEXT] [--timeout 30s]
       quorumfence reshare run --data DIR --proposal FILE --old-cluster FILE
                               [--old-key FILE] [--node-key-dir DIR] [--listen HOST:PORT] [--publish FILE] [--json]
       quorumfence reshare inherit --data DIR --key FILE --cluster FILE --old-cluster FILE --in FILE --in FILE ...
       quorumfence reshare endorse --cluster FILE --key FILE [--out FILE]
       quorumfence reshare endorse --cluster FILE --partial FILE --partial FILE ... [--out FILE]
       quorumfence reshare follow --cluster FILE --candidate FILE [--out FILE]
       quorumfence reshare retire --old-key FILE --old-cluster FILE [--key FILE] --cluster FILE

Gives the cluster's key new shares while the group key stays the same:
replace one replica (its share may be lost), add replicas (4 -> 7), remove
replicas (7 -> 4), or refresh every share with the same members. Each old
member deals its current share to the new members; each new member's share is
interpolated from t_old checked deals. The proposal is made with
"quorumfence dkg propose --old-cluster FILE --dealers LIST" from the NEW
members' cards (a continuing member keeps its index): the old cluster's id and
membership version and the dealers are part of its digest, so every member
reshares the same cluster from the same dealers, or the ceremony aborts. To
remove replicas (7 -> 4), old members that leave can deal from outside the
new set ("dkg propose --outside-dealer INDEX=CARD"): they deal their share
and receive nothing. See docs/resharing.md for the steps and the safety
argument.

freeze: durably freeze an old replica's signing record (it refuses every
request from then on, with REPLICA_FROZEN, also after a restart). Run it before
the reshare. With --data, on a STOPPED replica, and export the record signed
with the replica's share (the signed frozen export "inherit" takes) to --out
FILE or stdout. With --url, on a RUNNING replica started with
--operator-secret-file: POST /admin/freeze, which answers once the marker is
flushed (no grant is in flight past it); then export with "replica export
--data DIR --key FILE --cluster FILE" (read-only, beside the running replica).
  --data DIR               the stopped replica's data directory
  --key FILE               with --data: the replica's key file (signs the export)
  --cluster FILE           with --data: the cluster.json it runs with (the OLD cluster)
  --out FILE               with --data: where to write the frozen export (default: stdout)
  --url URL                the running replica's endpoint (ws://, wss://) or http(s) address
  --secret-file FILE       with --url: its operator secret (or $QUORUMFENCE_OPERATOR_SECRET)
  --ca FILE                with a wss:// or https:// --url: PEM certificate(s) to trust besides the
                           system's (a replica whose certificate this machine does not trust)
  --timeout DURATION       with --url: how long to wait for the answer (default 30s)
  --reason TEXT            kept in the freeze marker (default "reshare")

run: take part in the reshare ceremony, as the proposal names this node key:
  - a new member: writes its new replica.key and cluster.json into --data,
    which must not hold a key yet; if the proposal names it a dealer (a
    continuing member, same index), --old-key is its old key file;
  - an outside dealer (an old member leaving the set): deals the share in
    --old-key (required; old replica INDEX of the proposal's outside dealer
    entry), answers complaints, and ends once t_new members confirmed one
    result. It writes no key and no cluster.json; --data holds its node key
    and the record of the proposals it took part in.
Progress on stderr as JSON log lines (phases, who sent, excluded dealers, who is still awaited).
  --data DIR               the new generation's data directory (an outside dealer: where its node key is) (required)
  --proposal FILE          the reshare proposal (new members, dkg propose)       (required)
  --old-cluster FILE       the cluster being reshared (the proposal names its id) (required)
  --old-key FILE           this party's old key file: it deals its share
  --node-key-dir DIR       where its node key is (default: --data)
  --listen HOST:PORT       where the ceremony listens (default: its proposal endpoint)
  --publish FILE           a new member: also write the public cluster.json here
  --json                   print the result as one JSON line ("role": "member" or "dealer-only")

inherit: before a new replica first starts, raise its signing record from the
signed frozen exports of r >= 2f_old+1 distinct old replicas, keeping per
resource (and for the floor) the (r - 2f_old)-th largest report (an epoch
reported with two holders is blocked for everyone). Give it ALL old replicas'
frozen exports when they exist: then no lying replica can raise anything;
with fewer, one liar can raise epochs by up to 1/1024 of those left below
2^62: a value further above what f_old+1 exports back is refused
(EXPORT_UNBACKED_EPOCH: give more exports), and a claim at or above 2^62 as
a lie (EXPORT_IMPOSSIBLE_EPOCH); both name the files. Each export must be signed by its replica's share in the old
cluster.json (EXPORT_SIGNATURE_INVALID: relabelled or changed; EXPORT_UNSIGNED:
a v1/v2 export, e.g. one taken before the freeze); a refused input writes
nothing.
  --data DIR               the new replica's signing record ("replica run --data") (required)
  --key FILE               the new replica's key file (from "reshare run")        (required)
  --cluster FILE           the new cluster.json                                  (required)
  --old-cluster FILE       the old cluster.json                                  (required)
  --in FILE                a signed frozen export ("reshare freeze --data", or
                           "replica export --key" after a live freeze); repeat it (required, >= 2f_old+1)

endorse: sign the new membership with the group key, so holders of an older
cluster.json can follow it ("reshare follow"). With --key, one NEW member signs
the new cluster.json with its new share and writes its partial (public). With
--partial, t_new partials are checked and combined, and the new cluster.json
is written with its "endorsement". No share file leaves its member.
Each member endorses at most one description per membership version: before
its partial is written, the description's digest is recorded beside its key
(KEY.endorsed-vVERSION.json, flushed). The same description again gives the
same partial; another one at that version is refused
(MEMBERSHIP_ALREADY_ENDORSED) and nothing is signed.
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
otherwise it refuses (RESHARE_REFUSED) and erases nothing. An old member that
LEFT the set (an outside dealer) has no new key: without --key, --cluster must
be the new membership endorsed by the group key ("reshare endorse"), which
shows t_new new members hold working shares.
  --old-key FILE           the old key file to erase                              (required)
  --old-cluster FILE       the old cluster.json                                   (required)
  --key FILE               this member's NEW key file (kept); omit it for a member that left
  --cluster FILE           the NEW cluster.json (endorsed, without --key)         (required)`;

export const command: Command = {
  summary: 'new shares of the same key: replace, add, remove replicas or refresh shares',
  usage,
  run: (argv) => runSubcommand(argv, { freeze, run, inherit, endorse, follow, retire }),
};
