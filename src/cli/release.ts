/**
 * `quorumfence release RESOURCE EPOCH`: ends this identity's lease at EPOCH sooner than its ttl, from another
 * invocation than the one that took it (`acquire` without --hold leaves its lease to run out).
 */
import { QuorumFenceError } from '../common/errors.js';
import { parseFlags, resourceArgument, type Command } from '../command/args.js';
import { CLIENT_FLAGS, CLUSTER_FLAG_USAGE, IDENTITY_FLAG_USAGE, openClient } from './client-flags.js';

const usage = `usage: quorumfence release RESOURCE EPOCH [--cluster FILE] [--identity FILE] [--session S] [--json]

Releases the lease on RESOURCE at EPOCH that this identity holds (the epoch
"quorumfence acquire" printed), so another holder can take the resource at
once instead of after the ttl. Done once 2f+1 replicas confirm. The token of
that epoch stays valid at guards until a larger epoch writes there.

A lease belongs to the session that took it (docs/protocol.md, "Sessions"):
give --session, the session "quorumfence acquire --json" printed. Without it
the release speaks for a fresh session, which a replica that restarted since
the acquire (the session unknown there) accepts, and the others refuse.

Exit codes: 0 released; 1 not released (not_holder: the epoch is not, or no
longer, this identity's lease; unavailable, timeout); 2 bad flags.

options:
${CLUSTER_FLAG_USAGE}
${IDENTITY_FLAG_USAGE}
  --session S       the session that holds the lease (32 hex digits, as acquire printed it)
  --json            print one JSON object instead of text
`;

/** EPOCH as the command line gives it: decimal digits. @throws QuorumFenceError INVALID_OPTION */
export function parseEpochArgument(text: string): bigint {
  if (!/^[1-9]\d{0,18}$/.test(text) || BigInt(text) > 2n ** 63n - 1n)
    throw new QuorumFenceError('INVALID_OPTION', `EPOCH expects an integer in 1 .. 2^63-1, got "${text}"`);
  return BigInt(text);
}

export const command: Command = {
  summary: "release this identity's lease on a resource before its ttl",
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      { ...CLIENT_FLAGS, session: { type: 'string' }, json: { type: 'boolean' } },
      { min: 2, max: 2 },
    );
    const resource = resourceArgument(positionals[0]!);
    const epochText = positionals[1]!;
    const epoch = parseEpochArgument(epochText);
    const client = await openClient(values);
    try {
      const result = await client.release(resource, epoch);
      if (values.json) {
        process.stdout.write(
          JSON.stringify({
            ok: result.ok,
            resource,
            epoch: epoch.toString(),
            released: result.released,
            ...(result.ok ? {} : { reason: result.reason, message: result.message }),
            faults: result.faults,
          }) + '\n',
        );
      } else if (result.ok) {
        process.stdout.write(`released "${resource}" at epoch ${epoch} (${result.released} replicas confirmed)\n`);
      } else {
        const hint =
          result.reason === 'not_holder'
            ? '; check EPOCH and --session against the ones acquire printed, and that --identity is the identity that acquired it'
            : '';
        process.stderr.write(
          `quorumfence release: ${result.reason}: ${result.message}${hint} (${result.reason.toUpperCase()})\n`,
        );
      }
      return result.ok ? 0 : 1;
    } finally {
      await client.close();
    }
  },
};
