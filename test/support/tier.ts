/**
 * The long tier: `npm run test:long` runs everything `npm test` runs plus the tests registered here, which take
 * minutes each on two cores and repeat, at a larger size, what a shorter test of `npm test` already checks (a longer
 * walk through reshares, the bench's network and gray-fault sections, a longer soak). `npm test` stays near ten
 * minutes; CI runs `npm test`. Outside the long tier these tests are not registered at all, so no run counts them as
 * passed or shows them as skipped; docs/testing.md lists them.
 */
import { it } from 'vitest';

export const longTier = process.env.QUORUMFENCE_TEST_TIER === 'long';

/** `it`, registered only in the long tier. */
export function itInLongTier(name: string, test: () => Promise<void>, timeoutMs: number): void {
  if (longTier) it(`${name} (long tier)`, test, timeoutMs);
}
