/**
 * A signing thread: loads the replica's key share once, then signs batches of
 * grant messages. Runs with `workerData = { cluster, key, backend }` (the
 * parsed cluster description and key file, and the backend name), and checks
 * the share against the cluster exactly as the main thread did.
 *
 * Messages in:  { batch: number, messages: Uint8Array[] }
 * Messages out: { ready: true } once, then { batch, signatures: Uint8Array } (96 bytes each, concatenated)
 *               or { batch, error: string }; { fatal: string } when the key cannot be loaded.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { parseCluster } from '../cluster/description.js';
import { parseReplicaKey } from '../cluster/replica-key.js';
import { SIGNATURE_BYTES } from '../crypto/backend.js';
import { loadBackend, type BackendChoice } from '../crypto/load.js';

interface Batch {
  batch: number;
  messages: Uint8Array[];
}

const port = parentPort;
if (!port) throw new Error('signing-worker.js runs only as a worker thread');

try {
  const data = workerData as { cluster: unknown; key: unknown; backend: BackendChoice };
  const backend = loadBackend(data.backend);
  const cluster = parseCluster(data.cluster, { backend });
  const { secretKey } = parseReplicaKey(data.key, cluster);
  port.on('message', ({ batch, messages }: Batch) => {
    try {
      const out = new Uint8Array(messages.length * SIGNATURE_BYTES);
      messages.forEach((message, k) => out.set(backend.sign(secretKey, message).bytes, k * SIGNATURE_BYTES));
      port.postMessage({ batch, signatures: out }, [out.buffer]);
    } catch (error) {
      port.postMessage({ batch, error: (error as Error).message });
    }
  });
  port.postMessage({ ready: true });
} catch (error) {
  port.postMessage({ fatal: (error as Error).message });
}
