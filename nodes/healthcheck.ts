#!/usr/bin/env node
/**
 * Container health check: exits 0 when the URL answers 2xx within two
 * seconds, 1 otherwise. (The runtime image has no curl; node is there.)
 */
const url = process.argv[2] ?? 'http://127.0.0.1:7001/healthz';
try {
  const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
  process.exitCode = response.ok ? 0 : 1;
} catch {
  process.exitCode = 1;
}
