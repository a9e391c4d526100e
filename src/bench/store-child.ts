/**
 * One signing record in a process of its own, for `bench replica`'s "stores
 * flushing at once" figure: on each message from the parent it writes one
 * record (a new resource) and answers with the milliseconds from the put
 * until it was flushed. The directory is argv[2]. Never a test, never a server.
 */
import { openBenchStore, writeRecord } from './store.js';

const dir = process.argv[2];
if (!dir || !process.send) {
  process.stderr.write('store-child: run by bench replica through fork(), with a directory\n');
  process.exit(2);
}
const store = openBenchStore(dir);
let next = 0;

// Any message asks for one write; the parent kills this process when it is done (the folder is thrown away).
process.on('message', () => {
  const started = performance.now();
  void writeRecord(store, `together/${next++}`).then(
    () => process.send!(performance.now() - started),
    (error: unknown) => process.send!({ error: String(error) }),
  );
});
process.send('ready');
