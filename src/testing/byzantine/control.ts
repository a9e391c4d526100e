/**
 * Driving Byzantine replica processes from a test or a chaos run: where the
 * entry point is, and the control endpoint (`GET`/`PUT /byzantine`).
 */
import { dirname, join } from 'node:path';
import { QuorumFenceError } from '../../common/errors.js';
import { replicaEntryPoint } from '../../cluster/launcher.js';
import type { ByzantineControl, ByzantineState } from './front.js';

/** The compiled Byzantine replica entry point, beside the replica's (for `startLocalCluster({ entry })`). */
export function byzantineEntryPoint(): string {
  return join(dirname(replicaEntryPoint()), 'byzantine-replica.js');
}

/** A control request should take milliseconds; 5 s tolerates a loaded machine and a paused-then-resumed process. */
const CONTROL_TIMEOUT_MS = 5_000;

function controlUrl(replicaUrl: string): string {
  return replicaUrl.replace(/^ws/, 'http').replace(/\/+$/, '') + '/byzantine';
}

async function call(replicaUrl: string, init: RequestInit): Promise<ByzantineState> {
  let response: Response;
  try {
    response = await fetch(controlUrl(replicaUrl), { ...init, signal: AbortSignal.timeout(CONTROL_TIMEOUT_MS) });
  } catch (error) {
    throw new QuorumFenceError(
      'CONNECTION_FAILED',
      `byzantine control at ${replicaUrl}: ${(error as Error).message}`,
      undefined,
      { cause: error },
    );
  }
  const body = (await response.json().catch(() => ({}))) as ByzantineState & { error?: string };
  if (!response.ok)
    throw new QuorumFenceError(
      'INVALID_ARGUMENT',
      `byzantine control at ${replicaUrl}: ${body.error ?? response.status}`,
    );
  return body;
}

/**
 * The state of a Byzantine replica: behaviours, parameters, how often each acted.
 * @throws QuorumFenceError CONNECTION_FAILED
 */
export function byzantineState(replicaUrl: string): Promise<ByzantineState> {
  return call(replicaUrl, { method: 'GET' });
}

/**
 * Changes a running Byzantine replica's behaviours or parameters, or jumps its clock.
 * @throws QuorumFenceError CONNECTION_FAILED, INVALID_ARGUMENT (refused by the replica)
 */
export function controlByzantine(replicaUrl: string, change: ByzantineControl): Promise<ByzantineState> {
  return call(replicaUrl, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(change),
  });
}

export type { ByzantineControl, ByzantineState };
