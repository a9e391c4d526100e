/**
 * `quorumfence reshare inherit`: before a new replica first starts, raise its signing record from the signed
 * frozen exports of at least 2f_old+1 old replicas (src/replica/frozen-export.ts checks each; the rule is
 * src/replica/inherit.ts). Every input is checked before the store is opened: a refused one writes nothing.
 */
import { resolve } from 'node:path';
import { QuorumFenceError } from '../../common/errors.js';
import { readJsonFile } from '../../common/files.js';
import { clusterToJson, loadClusterFile } from '../../cluster/description.js';
import { loadReplicaKeyFile } from '../../cluster/replica-key.js';
import { inheritRecords, type OldRecordReport } from '../../replica/inherit.js';
import { readFrozenExport } from '../../replica/frozen-export.js';
import { SigningRecord } from '../../replica/signing-record.js';
import { parseFlags, required } from '../../command/args.js';

export async function inherit(argv: string[]): Promise<number> {
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
  const reports: OldRecordReport[] = (values.in ?? []).map((path) =>
    readFrozenExport(readJsonFile(resolve(path), 'frozen export', 'BAD_INTERCHANGE'), old, path),
  );
  const inherited = inheritRecords(reports, old.f, cluster.id);
  const dataDir = resolve(required(values.data, 'data'));
  const replicaIndex = loadReplicaKeyFile(resolve(required(values.key, 'key')), cluster).index;
  // The new member's record is made here, raised from the old set's: the one way a reshared replica gets one.
  const store = SigningRecord.open(dataDir, { clusterId: cluster.id, replicaIndex }, { create: true });
  try {
    const summary = await store.raiseFrom(inherited.entries, inherited.floor);
    const reporters = inherited.from.length;
    process.stderr.write(
      `reshare: replica ${replicaIndex} inherited the records of old replicas ${inherited.from.join(', ')}: ` +
        `${summary.raised} resource(s), floor ${inherited.floor}, each the report at rank ${inherited.rank} of ${reporters} (1 = the largest)` +
        (inherited.contested.length > 0
          ? `, ${inherited.contested.length} inherited epoch(s) blocked (holders disagreed, or a floor named none)`
          : '') +
        '\n' +
        (reporters < old.n
          ? `reshare: ${reporters} of ${old.n} old replicas reported: f_old = ${old.f} lying replicas among them could ` +
            `raise epochs (by at most 1/1024 of those left below 2^62); with all ${old.n} frozen exports none can\n`
          : ''),
    );
  } finally {
    await store.close();
  }
  return 0;
}
