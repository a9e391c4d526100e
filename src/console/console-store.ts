/**
 * What the console keeps across its restarts under `--data DIR` (docs/console.md, "What survives a restart"): the
 * 15-minute history, the recent grants, the alert timers, since when each replica is down and the status holds, the
 * convictions and the evidence. One LMDB environment (the dependency the replicas already use), one JSON snapshot
 * written in one transaction, durable (fsync) when `save` resolves; bounded by what it holds (180 buckets, 50 grants,
 * the evidence store's bounds), never by how long the console runs.
 *
 * It is the console's own record, not a replica's: losing it loses the page's past, never safety. A store of another
 * cluster is refused (CLUSTER_MISMATCH), so two clusters' consoles cannot mix their evidence.
 */
import { mkdirSync } from 'node:fs';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { Cluster } from '../cluster/description.js';
import { QuorumFenceError } from '../common/errors.js';
import type { StoredEvidence } from './evidence-store.js';
import type { StoredBucket } from './history.js';
import type { Conviction } from './view.js';

export const CONSOLE_STORE_FORMAT = 'quorumfence/console-store/v1';

export interface RecentGrant {
  readonly resource: string;
  readonly epoch: string;
  readonly holder: string;
  readonly firstSeenAt: string;
}

/** Everything the console keeps (each part bounded by its owner). */
export interface ConsoleSnapshot {
  /** When it was taken (ms, the console's clock). */
  readonly savedAt: number;
  readonly history: readonly StoredBucket[];
  readonly recentGrants: readonly RecentGrant[];
  readonly alertTimers: readonly (readonly [string, number])[];
  readonly downSince: readonly (readonly [number, string])[];
  readonly status: { readonly status: string; readonly since: string } | null;
  readonly convictions: readonly { readonly replica: number; readonly conviction: Conviction }[];
  readonly evidence: { readonly nextId: number; readonly items: readonly StoredEvidence[] };
  readonly evidenceByKind: Readonly<Record<string, number>>;
}

interface Meta {
  readonly format: string;
  readonly clusterId: string;
}

const META_KEY = 'meta';
const SNAPSHOT_KEY = 'snapshot';

export class ConsoleStore {
  readonly path: string;
  readonly #root: RootDatabase;
  readonly #db: Database<unknown, string>;

  private constructor(path: string, root: RootDatabase, db: Database<unknown, string>) {
    this.path = path;
    this.#root = root;
    this.#db = db;
  }

  /**
   * Opens (or creates) the store in `dir` for `cluster`.
   * @throws QuorumFenceError IO_ERROR (cannot create or open it), CLUSTER_MISMATCH (it is another cluster's),
   *   UNKNOWN_VERSION (another format)
   */
  static async open(dir: string, cluster: Cluster): Promise<ConsoleStore> {
    let root: RootDatabase;
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      // overlappingSync off: a commit's promise then means "on disk", as the replicas' stores open theirs.
      root = open({ path: dir, maxDbs: 2, overlappingSync: false });
    } catch (error) {
      throw new QuorumFenceError(
        'IO_ERROR',
        `cannot open the console's store in ${dir}: ${(error as Error).message}`,
        { path: dir },
        { cause: error },
      );
    }
    const db = root.openDB<unknown, string>('console', { encoding: 'json' });
    const store = new ConsoleStore(dir, root, db);
    try {
      const meta = db.get(META_KEY) as Meta | undefined;
      if (meta === undefined) await db.put(META_KEY, { format: CONSOLE_STORE_FORMAT, clusterId: cluster.idHex });
      else if (meta?.format !== CONSOLE_STORE_FORMAT)
        throw new QuorumFenceError(
          'UNKNOWN_VERSION',
          `${dir} holds ${JSON.stringify(String(meta?.format).slice(0, 60))}, not a console store (${CONSOLE_STORE_FORMAT}): give --data a folder of its own`,
          { path: dir },
        );
      else if (meta.clusterId !== cluster.idHex)
        throw new QuorumFenceError(
          'CLUSTER_MISMATCH',
          `${dir} is the console store of cluster ${String(meta.clusterId).slice(0, 16)}…, not of ${cluster.idHex.slice(0, 16)}…: give each cluster's console its own --data`,
          { path: dir },
        );
    } catch (error) {
      await root.close();
      throw error;
    }
    return store;
  }

  /** The snapshot an earlier run saved, or undefined (none, or one that is not an object: started afresh). */
  load(): Partial<ConsoleSnapshot> | undefined {
    const value = this.#db.get(SNAPSHOT_KEY);
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Partial<ConsoleSnapshot>)
      : undefined;
  }

  /** Writes the snapshot; resolves once it is on disk. */
  async save(snapshot: ConsoleSnapshot): Promise<void> {
    await this.#db.put(SNAPSHOT_KEY, snapshot);
  }

  async close(): Promise<void> {
    await this.#root.close();
  }
}
