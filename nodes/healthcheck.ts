#!/usr/bin/env node
/**
 * Container health check: exits 0 when the URL answers 2xx within eight
 * seconds, 1 otherwise. (The runtime image has no curl; node is there.) Eight:
 * under docker-compose.yml's 10 s probe timeout, and long enough that a busy
 * host's slow answer counts as alive while a hung server does not.
 */
const url = process.argv[2] ?? 'http://127.0.0.1:7001/healthz';
try {
  const response = await fetch(url, { signal: AbortSignal.timeout(8000) });
  process.exitCode = response.ok ? 0 : 1;
} catch {
  process.exitCode = 1;
}
