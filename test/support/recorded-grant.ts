/**
 * One grant written into a replica's real signing record (LMDB, flushed), as the replica would have recorded it:
 * the set-up of the reshare tests, which need old replicas' records holding known grants.
 */
import { SigningRecord } from '../../src/replica/signing-record.js';
import { grantDigest } from '../../src/token/grant.js';

export async function recordGrant(
  dir: string,
  replica: { readonly clusterId: Uint8Array; readonly replicaIndex: number },
  grant: { readonly resource: string; readonly epoch: bigint; readonly holder: Uint8Array },
): Promise<void> {
  const store = SigningRecord.open(dir, replica, { create: true });
  try {
    const { resource, epoch, holder } = grant;
    await store.checkAndRecord(resource, () => ({
      record: {
        epoch,
        holder,
        grantDigest: grantDigest({ clusterId: replica.clusterId, resource, epoch, holder }),
        released: false,
      },
      result: undefined,
    }));
  } finally {
    await store.close();
  }
}
