/**
 * Names for holder keys on the page (`quorumfence console --holders FILE`). The replicas' access config
 * (src/replica/access.ts) keys holders by hex and names none, so the operator may give the console a file:
 *
 *   { "format": "quorumfence/console-holders/v1", "holders": { "<64 hex chars>": "billing-worker-1" } }
 *
 * A name is only a label the operator chose: nothing is decided by it.
 */
import { fromHex } from '../common/bytes.js';
import { checkNameCharacters, describe } from '../common/check.js';
import { QuorumFenceError } from '../common/errors.js';
import { readJsonFile } from '../common/files.js';

export const HOLDER_NAMES_FORMAT = 'quorumfence/console-holders/v1';

/** Read once at start; bounded so a wrong file cannot make the console crawl. */
const MAX_HOLDER_NAMES = 100_000;
/** Long enough for a service and an instance, short enough for a table cell. */
const MAX_NAME_LENGTH = 64;

function bad(field: string, message: string): never {
  throw new QuorumFenceError('INVALID_OPTION', `holder names: "${field}" ${message}`, { field });
}

/**
 * Checks a parsed holder names file: holder key (lowercase hex) → name.
 * @throws QuorumFenceError INVALID_OPTION naming the field, UNKNOWN_VERSION for another format
 */
export function parseHolderNames(json: unknown): ReadonlyMap<string, string> {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) bad('(root)', 'expected a JSON object');
  const o = json as Record<string, unknown>;
  if (o.format !== HOLDER_NAMES_FORMAT)
    throw new QuorumFenceError(
      'UNKNOWN_VERSION',
      `holder names: "format" expected "${HOLDER_NAMES_FORMAT}", got ${JSON.stringify(o.format)?.slice(0, 80)}`,
    );
  for (const key of Object.keys(o))
    if (!['format', 'holders'].includes(key)) bad(key.slice(0, 70), 'is not a known field');
  if (typeof o.holders !== 'object' || o.holders === null || Array.isArray(o.holders))
    bad('holders', `expected an object keyed by holder key hex, got ${describe(o.holders)}`);
  const entries = Object.entries(o.holders);
  if (entries.length > MAX_HOLDER_NAMES) bad('holders', `expected at most ${MAX_HOLDER_NAMES} holders`);
  const names = new Map<string, string>();
  for (const [key, name] of entries) {
    const field = `holders.${key.slice(0, 70)}`;
    try {
      fromHex(key, 32, field);
    } catch (error) {
      bad(field, `is not a 32-byte holder key in lowercase hex (${(error as QuorumFenceError).code})`);
    }
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME_LENGTH)
      bad(field, `expected a name of 1..${MAX_NAME_LENGTH} characters, got ${describe(name)}`);
    try {
      checkNameCharacters(name, field);
    } catch (error) {
      bad(field, (error as QuorumFenceError).message);
    }
    names.set(key, name);
  }
  return names;
}

/**
 * Reads and checks a holder names file.
 * @throws QuorumFenceError IO_ERROR, INVALID_OPTION, UNKNOWN_VERSION
 */
export function loadHolderNames(path: string): ReadonlyMap<string, string> {
  return parseHolderNames(readJsonFile(path, 'holder names file', 'INVALID_OPTION'));
}
