/**
 * Counting a round's answers by quorum, the one way every client call does it (status, acquire, renew,
 * release). A call succeeds with `need` answers of the kind it wants; a refusal counts only once f+1 replicas
 * give it (so at least one honest replica does); and a round stops early once neither can happen any more.
 * Pure: the caller feeds answers and how many replicas could still answer.
 */

export class QuorumTally<Refusal extends string> {
  readonly f: number;
  readonly need: number;
  #accepted = 0;
  readonly #refusals = new Map<Refusal, string[]>();

  constructor(f: number, need: number) {
    this.f = f;
    this.need = need;
  }

  get accepted(): number {
    return this.#accepted;
  }

  accept(): void {
    this.#accepted++;
  }

  /** One replica's refusal; `message` keeps what it said (the first is quoted to the caller). */
  refuse(kind: Refusal, message = ''): void {
    const list = this.#refusals.get(kind) ?? [];
    list.push(message);
    this.#refusals.set(kind, list);
  }

  count(kind: Refusal): number {
    return this.#refusals.get(kind)?.length ?? 0;
  }

  /** The first of `kinds` (in the caller's order of precedence) that f+1 replicas gave, with how many and what the first said. */
  confirmed(...kinds: Refusal[]): { kind: Refusal; count: number; first: string } | undefined {
    for (const kind of kinds) {
      const list = this.#refusals.get(kind);
      if (list && list.length > this.f) return { kind, count: list.length, first: list[0]! };
    }
    return undefined;
  }

  /** Keep waiting for answers: not yet `need` accepted, no refusal confirmed, and `possible` more could still reach `need`. */
  open(possible: number): boolean {
    if (this.#accepted >= this.need) return false;
    for (const list of this.#refusals.values()) if (list.length > this.f) return false;
    return this.#accepted + possible >= this.need;
  }
}
