/**
 * A Map that holds at most `capacity` entries: setting a key makes it the newest, and the oldest entries go
 * first when there are too many. `get` does not reorder (so a cache of verified tokens evicts by age of
 * verification, not by use). One implementation for every cache and memory the project bounds.
 */
export class BoundedMap<K, V> extends Map<K, V> {
  readonly capacity: number;

  /** @param capacity the most entries kept; 0 keeps none. */
  constructor(capacity: number) {
    super();
    if (!Number.isSafeInteger(capacity) || capacity < 0)
      throw new RangeError(`BoundedMap capacity must be a whole number >= 0, got ${capacity}`);
    this.capacity = capacity;
  }

  override set(key: K, value: V): this {
    // Map's constructor calls set() for initial entries before `capacity` is assigned; there are none here.
    if (this.capacity === 0) return this;
    super.delete(key);
    super.set(key, value);
    while (this.size > this.capacity) super.delete(super.keys().next().value as K);
    return this;
  }
}
