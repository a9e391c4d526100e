/**
 * The timed queue both proxies deliver through (fault-proxy.ts per WebSocket
 * message, delay-proxy.ts per TCP chunk): each delivery leaves no earlier
 * than its time, and strictly in the order it was queued.
 */
export interface Delivery {
  /** performance.now() time before which it must not leave. */
  at: number;
  deliver(): void;
}

/**
 * Deliveries leave strictly in the order they were queued, each no earlier
 * than its time: one timer drains the head, so timer rounding can never let a
 * later message overtake an earlier one.
 */
export class DeliveryQueue {
  readonly #items: Delivery[] = [];
  #timer: NodeJS.Timeout | undefined;

  push(delivery: Delivery): void {
    this.#items.push(delivery);
    if (!this.#timer) this.#drain();
  }

  /** Drops what is still waiting (its link is gone). */
  clear(): void {
    this.#items.length = 0;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #drain = (): void => {
    this.#timer = undefined;
    while (this.#items.length > 0 && this.#items[0]!.at <= performance.now()) this.#items.shift()!.deliver();
    if (this.#items.length > 0)
      this.#timer = setTimeout(this.#drain, Math.max(1, this.#items[0]!.at - performance.now()));
  };
}
