#!/usr/bin/env node
/** `npm start`: the local cluster demo (the same as `quorumfence demo`). */
import { main } from '../src/cli/main.js';

process.exitCode = await main(['demo', ...process.argv.slice(2)]);
