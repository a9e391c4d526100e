/**
 * Negative tests assert the error code, not just "throws": this runs `fn`
 * and returns the code of the QuorumFenceError it threw, undefined when it
 * did not throw, and a description of anything else it threw.
 */
import { isQuorumFenceError } from '../../src/common/errors.js';

export function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    return isQuorumFenceError(error) ? error.code : `not a QuorumFenceError: ${String(error)}`;
  }
  return undefined;
}
