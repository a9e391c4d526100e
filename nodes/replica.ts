#!/usr/bin/env node
/**
 * The replica process: `node dist/nodes/replica.js --cluster FILE --key FILE --data DIR [...]`,
 * the same flags as `quorumfence replica` (run it with --help for the list).
 */
import { main } from '../src/cli/main.js';

process.exitCode = await main(['replica', ...process.argv.slice(2)]);
