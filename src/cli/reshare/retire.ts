/**
 * `quorumfence reshare retire`: once a member's new replica runs, erase its old key file, so its old share
 * cannot join t-1 others to sign again. Refused, erasing nothing, unless both keys are what they claim. An
 * old member that left the set (an outside dealer of a removal) has no new key: it retires once the new
 * membership is endorsed by the group key, which shows t_new new members hold working shares.
 */
import { closeSync, fsyncSync, openSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { QuorumFenceError } from '../../common/errors.js';
import { refuseIrregularFile, syncDirectory } from '../../common/files.js';
import { clusterToJson, loadClusterFile, type Cluster } from '../../cluster/description.js';
import { followMembership } from '../../cluster/membership.js';
import { loadReplicaKeyFile } from '../../cluster/replica-key.js';
import { parseFlags, required } from '../../command/args.js';

export async function retire(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    'old-key': { type: 'string' },
    'old-cluster': { type: 'string' },
    key: { type: 'string' },
    cluster: { type: 'string' },
  });
  const oldKeyPath = resolve(required(values['old-key'], 'old-key'));
  // Erasing writes zeros through the path: a link would zero whatever it points to, and leave it behind.
  refuseIrregularFile(oldKeyPath, 'erase');
  const old = loadClusterFile(resolve(required(values['old-cluster'], 'old-cluster')));
  const next = loadClusterFile(resolve(required(values.cluster, 'cluster')));
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
  if (values.key === undefined) return retireLeaving(oldKeyPath, old, next);
  const newKeyPath = resolve(values.key);
  if (newKeyPath === oldKeyPath)
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

/** A member that left the set: its old share goes once the new membership is endorsed (it has no new key). */
function retireLeaving(oldKeyPath: string, old: Cluster, next: Cluster): number {
  const followed = followMembership(old, clusterToJson(next));
  if (!followed.ok)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `without --key, --cluster must be an endorsed newer membership (reshare endorse): ${followed.message} (${followed.code}); nothing erased`,
    );
  let oldIndex: number;
  try {
    oldIndex = loadReplicaKeyFile(oldKeyPath, old).index;
  } catch (error) {
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `--old-key is not a share of --old-cluster: ${(error as Error).message}; nothing erased`,
      undefined,
      { cause: error },
    );
  }
  eraseFile(oldKeyPath);
  process.stderr.write(
    `reshare: erased old replica ${oldIndex}'s share (${oldKeyPath}) of membership ${old.membershipVersion}; ` +
      `membership ${next.membershipVersion} (n = ${next.n}) is endorsed by the group key\n`,
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
