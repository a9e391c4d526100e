/**
 * Access rules: which holder keys may use which resources, by name prefix.
 * Pure data and a pure check; `loadAccessRules` is the one place that reads
 * the replica's `--config` file.
 *
 * File format (JSON):
 *
 *   {
 *     "format": "quorumfence/replica-access/v1",
 *     "defaultPrefixes": ["public/"],                  // optional: for holders not listed; [] = nothing
 *     "holders": { "<64 hex chars>": ["orders/", ""] } // optional: "" means every resource
 *   }
 *
 * A holder listed in `holders` gets exactly its own prefixes (not the
 * defaults). Without a config file every authenticated holder may use every
 * resource.
 */
import { readJsonFile } from '../common/files.js';
import { QuorumFenceError } from '../common/errors.js';
import { fromHex, toHex } from '../common/bytes.js';
import { describe } from '../common/check.js';
import { MAX_RESOURCE_BYTES } from '../common/limits.js';

export const ACCESS_FORMAT = 'quorumfence/replica-access/v1';

/** A config file is read once at start, but bound its size so a typo cannot make startup crawl. */
const MAX_HOLDERS = 100_000;
const MAX_PREFIXES_PER_HOLDER = 1_000;

export interface AccessRules {
  /** Prefixes for holders not in `holders`. */
  readonly defaultPrefixes: readonly string[];
  /** Holder public key (lowercase hex) → its prefixes. */
  readonly holders: ReadonlyMap<string, readonly string[]>;
}

/** The rules without a config file: everyone may use everything. */
export const OPEN_ACCESS: AccessRules = { defaultPrefixes: [''], holders: new Map() };

/** True when `holder` may acquire, renew, release or ask the status of `resource`. */
export function mayAccess(rules: AccessRules, holder: Uint8Array, resource: string): boolean {
  const prefixes =
    rules.holders.size === 0 ? rules.defaultPrefixes : (rules.holders.get(toHex(holder)) ?? rules.defaultPrefixes);
  for (const prefix of prefixes) if (resource.startsWith(prefix)) return true;
  return false;
}

function bad(field: string, message: string): never {
  throw new QuorumFenceError('INVALID_OPTION', `access config: "${field}" ${message}`, { field });
}

function prefixList(value: unknown, field: string): string[] {
  if (!Array.isArray(value)) bad(field, `expected an array of strings, got ${describe(value)}`);
  if (value.length > MAX_PREFIXES_PER_HOLDER) bad(field, `expected at most ${MAX_PREFIXES_PER_HOLDER} prefixes`);
  return value.map((p: unknown, k) => {
    if (typeof p !== 'string' || Buffer.byteLength(p) > MAX_RESOURCE_BYTES)
      bad(`${field}[${k}]`, `expected a string of at most ${MAX_RESOURCE_BYTES} bytes`);
    return p;
  });
}

/**
 * Checks a parsed access config.
 * @throws QuorumFenceError INVALID_OPTION naming the field, UNKNOWN_VERSION for another format.
 */
export function parseAccessRules(json: unknown): AccessRules {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) bad('(root)', 'expected a JSON object');
  const c = json as Record<string, unknown>;
  if (c.format !== ACCESS_FORMAT) {
    throw new QuorumFenceError(
      'UNKNOWN_VERSION',
      `access config: "format" expected "${ACCESS_FORMAT}", got ${JSON.stringify(c.format)}`,
    );
  }
  for (const key of Object.keys(c))
    if (!['format', 'defaultPrefixes', 'holders'].includes(key)) bad(key, 'is not a known field');
  const defaultPrefixes = c.defaultPrefixes === undefined ? [] : prefixList(c.defaultPrefixes, 'defaultPrefixes');
  const holders = new Map<string, string[]>();
  if (c.holders !== undefined) {
    if (typeof c.holders !== 'object' || c.holders === null || Array.isArray(c.holders))
      bad('holders', 'expected an object keyed by holder key hex');
    const entries = Object.entries(c.holders);
    if (entries.length > MAX_HOLDERS) bad('holders', `expected at most ${MAX_HOLDERS} holders`);
    for (const [key, prefixes] of entries) {
      try {
        fromHex(key, 32, `holders.${key.slice(0, 70)}`);
      } catch (error) {
        bad(
          `holders.${key.slice(0, 70)}`,
          `is not a 32-byte holder key in lowercase hex (${(error as QuorumFenceError).code})`,
        );
      }
      holders.set(key, prefixList(prefixes, `holders.${key}`));
    }
  }
  // With no holders listed, mayAccess reads defaultPrefixes directly.
  return { defaultPrefixes, holders };
}

/**
 * Reads and checks an access config file.
 * @throws QuorumFenceError IO_ERROR, INVALID_OPTION, UNKNOWN_VERSION
 */
export function loadAccessRules(path: string): AccessRules {
  return parseAccessRules(readJsonFile(path, 'access config', 'INVALID_OPTION'));
}
