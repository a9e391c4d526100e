/**
 * The signing record's part of `bench replica` (never a test): the store
 * alone in this process (group-commit records/s, and one write at a time to
 * flushed), and three stores in three processes (store-child.ts) written at
 * the same moment, the disk's share of an acquire that needs t = 3 flushes.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { QuorumFenceError } from '../common/errors.js';
import { SigningRecord } from '../replica/signing-record.js';
import { grantDigest } from '../token/grant.js';
import { summarise, type Timing } from './measure.js';

const clusterId = new Uint8Array(32).fill(2);
const holder = new Uint8Array(32).fill(3);

/** A benchmark store (cluster and replica made up): the same identity for the one here and those in children. */
export function openBenchStore(dir: string): SigningRecord {
  return SigningRecord.open(dir, { clusterId, replicaIndex: 1 }, { create: true });
}

/** One durable grant at epoch 1 for a resource the store has not seen. */
export function writeRecord(store: SigningRecord, resource: string): Promise<void> {
  return store.checkAndRecord(resource, () => ({
    record: { epoch: 1n, holder, grantDigest: grantDigest({ clusterId, resource, epoch: 1n, holder }) },
    result: undefined,
  }));
}

/** The signing record alone: records/s with 512 writes in flight (group commit), then `alone` writes one at a time. */
export async function measureStore(
  dir: string,
  records: number,
  alone: number,
): Promise<{ recordsPerSecond: number; oneWriteMs: Timing }> {
  const store = openBenchStore(dir);
  try {
    let next = 0;
    const write = (resource: string) => writeRecord(store, resource);
    const start = performance.now();
    // As many concurrent grants as the replica would have in flight: they share transactions and syncs.
    await Promise.all(
      Array.from({ length: 512 }, async () => {
        while (next < records) await write(`store/${next++}`);
      }),
    );
    const recordsPerSecond = records / ((performance.now() - start) / 1000);
    const samples: number[] = [];
    for (let k = 0; k < alone; k++) {
      const t0 = performance.now();
      await write(`alone/${k}`);
      samples.push(performance.now() - t0);
    }
    return { recordsPerSecond, oneWriteMs: summarise(samples) };
  } finally {
    await store.close();
  }
}

/** `stores` signing records in child processes, written at the same moment, `rounds` times. */
export async function measureStoresTogether(
  dir: string,
  stores: number,
  rounds: number,
): Promise<{ stores: number; eachMs: Timing; allMs: Timing }> {
  const children = Array.from({ length: stores }, (_, k) =>
    fork(fileURLToPath(new URL('./store-child.js', import.meta.url)), [join(dir, `store-${k}`)], {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    }),
  );
  const answer = (child: ChildProcess) =>
    new Promise<unknown>((resolve, reject) => {
      const onMessage = (message: unknown) => {
        child.off('exit', onExit);
        resolve(message);
      };
      const onExit = (code: number | null) => {
        child.off('message', onMessage);
        reject(new QuorumFenceError('INTERNAL', `a store process exited (${code})`));
      };
      child.once('message', onMessage);
      child.once('exit', onExit);
    });
  try {
    await Promise.all(children.map(answer));
    const each: number[] = [];
    const all: number[] = [];
    for (let round = 0; round < rounds; round++) {
      const started = performance.now();
      const answers = await Promise.all(
        children.map((child) => {
          const answered = answer(child);
          child.send('write');
          return answered;
        }),
      );
      all.push(performance.now() - started);
      for (const a of answers) {
        if (typeof a !== 'number')
          throw new QuorumFenceError('INTERNAL', `a store process failed: ${JSON.stringify(a)}`);
        each.push(a);
      }
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
    return { stores, eachMs: summarise(each), allMs: summarise(all) };
  } finally {
    for (const child of children) {
      child.removeAllListeners();
      child.kill();
    }
  }
}
