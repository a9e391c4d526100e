#!/usr/bin/env node
/** The `quorumfence` command: every verb (keygen, verify, replica, resource, acquire, ...). */
import { main } from '../src/cli/main.js';

process.exitCode = await main(process.argv.slice(2));
