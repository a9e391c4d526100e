/**
 * `quorumfence reshare follow`: take a newer membership of the cluster only if the group key endorsed it
 * (followMembership, src/cluster/membership.ts).
 */
import { resolve } from 'node:path';
import { QuorumFenceError } from '../../common/errors.js';
import { readJsonFile, writeFileDurably } from '../../common/files.js';
import { loadClusterFile } from '../../cluster/description.js';
import { followMembership } from '../../cluster/membership.js';
import { parseFlags, required } from '../../command/args.js';

export async function follow(argv: string[]): Promise<number> {
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
