#!/usr/bin/env node
/**
 * The reference guarded resource: `node dist/nodes/resource.js --cluster FILE --data DIR [--listen HOST:PORT] [...]`,
 * the same flags as `quorumfence resource` (run it with --help for the list).
 */
import { main } from '../src/cli/main.js';

process.exitCode = await main(['resource', ...process.argv.slice(2)]);
