#!/usr/bin/env node
/**
 * A replica that lies on purpose, for tests, the demo and chaos runs:
 * `node dist/nodes/byzantine-replica.js` with the replica's flags plus
 * `--behaviour NAME[,NAME...]` (run it with --help for the list). It wraps the
 * real replica code; the production replica (`quorumfence replica`,
 * nodes/replica.ts) has no attack switch.
 */
import { QuorumFenceError } from '../src/common/errors.js';
import { runByzantineReplica } from '../src/testing/byzantine/process.js';

try {
  process.exitCode = await runByzantineReplica(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof QuorumFenceError)) throw error;
  process.stderr.write(`byzantine-replica: ${error.message} (${error.code})\n`);
  process.exitCode = error.code === 'INVALID_OPTION' ? 2 : 1;
}
