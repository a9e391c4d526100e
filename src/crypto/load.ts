/**
 * Picks the BLS backend: the native one when it loads, else the reference.
 * `QUORUMFENCE_BLS_BACKEND` (or the `backend` option of any entry point)
 * forces one: `blst`, `noble`, or `auto` (the default).
 */
import { createRequire } from 'node:module';
import { QuorumFenceError } from '../common/errors.js';
import type { BackendName, BlsBackend } from './backend.js';
import { createBlstBackend } from './blst.js';
import { createNobleBackend } from './noble.js';

export type BackendChoice = BackendName | 'auto';
export const BACKEND_ENVIRONMENT_VARIABLE = 'QUORUMFENCE_BLS_BACKEND';

const loaded = new Map<BackendName, BlsBackend>();
let nativeLoadError: unknown;

function loadNative(): BlsBackend | undefined {
  let backend = loaded.get('blst');
  if (backend || nativeLoadError) return backend;
  try {
    const native = createRequire(import.meta.url)('@chainsafe/blst') as Parameters<typeof createBlstBackend>[0];
    backend = createBlstBackend(native);
    loaded.set('blst', backend);
  } catch (error) {
    nativeLoadError = error;
  }
  return backend;
}

function loadNoble(): BlsBackend {
  let backend = loaded.get('noble');
  if (!backend) {
    backend = createNobleBackend();
    loaded.set('noble', backend);
  }
  return backend;
}

/**
 * @param choice defaults to the environment variable, then `auto`.
 * @throws QuorumFenceError BACKEND_UNAVAILABLE when `blst` is forced and does not load; INVALID_OPTION for an unknown name.
 */
export function loadBackend(choice?: BackendChoice): BlsBackend {
  const wanted = choice ?? process.env[BACKEND_ENVIRONMENT_VARIABLE] ?? 'auto';
  switch (wanted) {
    case 'noble':
      return loadNoble();
    case 'blst': {
      const backend = loadNative();
      if (!backend) {
        throw new QuorumFenceError(
          'BACKEND_UNAVAILABLE',
          `the native BLS backend did not load: ${String(nativeLoadError)}`,
          undefined,
          {
            cause: nativeLoadError,
          },
        );
      }
      return backend;
    }
    case 'auto':
    case '':
      return loadNative() ?? loadNoble();
    default:
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `unknown BLS backend "${wanted}" (from ${choice ? 'the backend option' : BACKEND_ENVIRONMENT_VARIABLE}); use blst, noble or auto`,
      );
  }
}
