/**
 * One real replica process (replica 1 of a freshly dealt N = 4 cluster) in a temporary directory, started with an
 * access file: every holder may use every resource except the ones `holders` restricts to their prefixes.
 * The tests that speak the raw protocol to a single replica share this set-up.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { toHex } from '../../src/common/bytes.js';

export interface OneReplica {
  readonly root: string;
  readonly local: LocalCluster;
  /** The replica's WebSocket URL. */
  readonly url: string;
  /** Stops the replica and removes its directory. */
  close(): Promise<void>;
}

/**
 * @param name the temporary directory's prefix
 * @param holders public key → the resource prefixes that holder may use (an empty list: none)
 * @param extraArgs more `replica run` flags
 */
export async function startOneReplica(
  name: string,
  holders: ReadonlyMap<Uint8Array, readonly string[]>,
  extraArgs: readonly string[] = [],
): Promise<OneReplica> {
  const root = mkdtempSync(join(tmpdir(), `${name}-`));
  try {
    dealLocalCluster(join(root, 'keys'));
    const accessPath = join(root, 'access.json');
    writeFileSync(
      accessPath,
      JSON.stringify({
        format: 'quorumfence/replica-access/v1',
        defaultPrefixes: [''],
        holders: Object.fromEntries([...holders].map(([key, prefixes]) => [toHex(key), prefixes])),
      }),
    );
    const local = await startLocalCluster({
      newStores: true,
      dir: join(root, 'keys'),
      indices: [1],
      dataRoot: join(root, 'data'),
      extraArgs: ['--config', accessPath, ...extraArgs],
    });
    return {
      root,
      local,
      url: local.replica(1).url,
      close: async () => {
        await local.close();
        rmSync(root, { recursive: true, force: true });
      },
    };
  } catch (error) {
    rmSync(root, { recursive: true, force: true });
    throw error;
  }
}
