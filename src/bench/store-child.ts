/**
 * One signing record in a process of its own, for `bench replica`'s "stores
 * flushing at once" figure: on each message from the parent it writes one
 * record (a new resource) and answers with the milliseconds from the put
 * until it was flushed. The directory is argv[2]. Never a test, never a server.
 */
import { SigningRecord } from '../replica/signing-record.js';
import { grantDigest } from '../token/grant.js';

const dir = process.argv[2];
if (!dir || !process.send) {
  process.stderr.write('store-child: run by bench replica through fork(), with a directory\n');
  process.exit(2);
}
const clusterId = new Uint8Array(32).fill(2);
const holder = new Uint8Array(32).fill(3);
const store = SigningRecord.open(dir, { clusterId, replicaIndex: 1 });
let next = 0;

process.on('message', (message) => {
  if (message === 'close') {
    void store.close().then(() => process.exit(0));
    return;
  }
  const resource = `together/${next++}`;
  const started = performance.now();
  void store
    .checkAndRecord(resource, () => ({
      record: { epoch: 1n, holder, grantDigest: grantDigest({ clusterId, resource, epoch: 1n, holder }) },
      result: undefined,
    }))
    .then(
      () => process.send!(performance.now() - started),
      (error: unknown) => process.send!({ error: String(error) }),
    );
});
process.send('ready');
