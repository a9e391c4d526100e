#!/usr/bin/env node
/** The `quorumfence-dev` command: the development tools (demo, chaos, bench, worker). */
import { main } from '../src/devtools/main.js';

process.exitCode = await main(process.argv.slice(2));
