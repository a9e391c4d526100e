#!/usr/bin/env node
/** `npm start`: the local cluster demo (the same as `quorumfence-dev demo`). */
import { main } from '../src/devtools/main.js';

process.exitCode = await main(['demo', ...process.argv.slice(2)]);
