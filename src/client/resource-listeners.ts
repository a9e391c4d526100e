/** Listeners per resource for the replicas' unasked notices (released, turn): hints that wake a waiting acquire. */
export class ResourceListeners<Args extends unknown[]> {
  readonly #byResource = new Map<string, Set<(...args: Args) => void>>();

  /** Adds `listener` for `resource`; returns a function that removes it. */
  listen(resource: string, listener: (...args: Args) => void): () => void {
    let listeners = this.#byResource.get(resource);
    if (!listeners) this.#byResource.set(resource, (listeners = new Set()));
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0) this.#byResource.delete(resource);
    };
  }

  notify(resource: string, ...args: Args): void {
    for (const listener of this.#byResource.get(resource) ?? []) listener(...args);
  }
}
