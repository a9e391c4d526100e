/**
 * The `released` notices (docs/protocol.md, Replica rules): a connection told that a resource is held (a busy
 * acquire, a status with a running lease) is pushed `released { resource }` when its holder releases it, a hint
 * to retry now. Bounded: at most `maxResources` resources are watched (the oldest forgotten first) and
 * `maxPerResource` connections per resource. The server keeps one for its connections; the simulator keeps one
 * per simulated replica.
 */
import { BoundedMap } from '../common/bounded-map.js';
import type { Outcome, Request } from '../protocol/messages.js';

/** What an answer obliges the replica to: remember the asker (`watch`), tell the watchers (`announce`), or nothing. */
export function noticeAfter(request: Request, outcome: Outcome): 'watch' | 'announce' | undefined {
  if (request.type === 'acquire' && outcome.status === 'busy') return 'watch';
  if (request.type === 'status' && outcome.status === 'ok' && outcome.leased) return 'watch';
  if (request.type === 'release' && outcome.status === 'released') return 'announce';
  return undefined;
}

export class ReleaseWatchers<C> {
  /** Resource → connections told it is held since its last release (insertion order = age). */
  readonly #watchers: BoundedMap<string, Set<C>>;
  readonly #maxPerResource: number;

  constructor(maxResources: number, maxPerResource: number) {
    this.#watchers = new BoundedMap(maxResources);
    this.#maxPerResource = maxPerResource;
  }

  /** Remembers that `connection` waits for `resource`. */
  watch(resource: string, connection: C): void {
    let watchers = this.#watchers.get(resource);
    if (!watchers) {
      watchers = new Set();
      this.#watchers.set(resource, watchers);
    }
    if (watchers.size < this.#maxPerResource) watchers.add(connection);
  }

  /** The connections to tell that `resource` was released; they are forgotten. */
  take(resource: string): readonly C[] {
    const watchers = this.#watchers.get(resource);
    if (!watchers) return [];
    this.#watchers.delete(resource);
    return [...watchers];
  }

  /** Resources watched now. */
  get size(): number {
    return this.#watchers.size;
  }
}
