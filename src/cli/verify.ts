/**
 * `quorumfence verify`: check an admission token against a cluster description, offline; then, when it can ask
 * the replicas (an identity to connect with), whether the token is still current, or say plainly that it cannot
 * tell.
 */
import { readFileSync } from 'node:fs';
import { toHex } from '../common/bytes.js';
import { QuorumFenceError } from '../common/errors.js';
import { createLogger } from '../common/log.js';
import { checkToken, tokenDigest } from '../token/admission-token.js';
import { QuorumFenceClient } from '../client/client.js';
import { loadIdentityFile } from '../client/identity.js';
import type { ResourceStatus } from '../client/status.js';
import { loadClusterFile, type Cluster } from '../cluster/description.js';
import { IDENTITY_ENVIRONMENT_VARIABLE, parseDuration, parseFlags, type Command } from '../command/args.js';
import { CLUSTER_FLAG_USAGE, clusterPathOf } from './client-flags.js';

/** How long verify waits for the replicas' answers when it asks whether a token is current. */
const DEFAULT_CURRENCY_TIMEOUT_MS = 2_000;

const usage = `usage: quorumfence verify TOKEN [--cluster FILE] [--identity FILE] [--offline] [--timeout 2s] [--json]

Checks an admission token (text form, or "-" to read it from stdin) against the
cluster's group public key, offline, and prints the token's fields. Exit code 0
when valid, 1 when not.

Then, for a valid token, whether it is still current: with an identity
(--identity, or $${IDENTITY_ENVIRONMENT_VARIABLE}) it asks the replicas for the token's resource, as
"quorumfence status" does, and says one of
  current      its lease runs (f+1 replicas say so), with about how long it has left
  ended        its lease ended (expired or released) and no later epoch was granted;
               a guard still accepts it until a later token for the resource writes
  superseded   the replicas are at a later epoch for the resource (a later grant, or
               the record folded into a higher floor); a guard refuses this token
               once a later one has written there
  unknown      it could not tell, and why (no identity, --offline, too few answers)
The validity of the token (and the exit code) never depends on that answer.

options:
${CLUSTER_FLAG_USAGE}
  --identity FILE  the identity to ask the replicas with; default $${IDENTITY_ENVIRONMENT_VARIABLE}
  --offline        do not ask the replicas (currency: unknown)
  --timeout DURATION  how long to wait for the replicas' answers (default ${DEFAULT_CURRENCY_TIMEOUT_MS / 1000}s)
  --json           print one JSON object instead of text
`;

/** Whether a valid token is still the one the replicas hold for its resource. */
export type TokenCurrency =
  | { readonly state: 'current'; readonly remainingMs: number }
  | { readonly state: 'ended' }
  | { readonly state: 'superseded'; readonly epoch: bigint }
  | { readonly state: 'unknown'; readonly reason: string };

/**
 * The currency of a token at `tokenEpoch` from the replicas' status of its resource (the (f+1)-th rules of
 * src/client/status.ts, so f lying replicas cannot paint it). Pure.
 */
export function tokenCurrency(
  tokenEpoch: bigint,
  status: ResourceStatus,
  cluster: Pick<Cluster, 'n' | 't'>,
): TokenCurrency {
  if (status.epoch === undefined)
    return {
      state: 'unknown',
      reason: `${status.answered} of the ${cluster.n} replicas answered, ${cluster.t} are needed`,
    };
  if (status.epoch > tokenEpoch) return { state: 'superseded', epoch: status.epoch };
  if (status.epoch < tokenEpoch)
    return {
      state: 'unknown',
      reason: `the replicas report epoch ${status.epoch} for the resource, below the token's: more than f of their records were lost or restored from an old copy`,
    };
  return status.leased ? { state: 'current', remainingMs: status.remainingMs ?? 0 } : { state: 'ended' };
}

/** The one line the text output gives the currency. Pure. */
export function currencyLine(currency: TokenCurrency): string {
  switch (currency.state) {
    case 'current':
      return `yes: its lease runs (about ${Math.ceil(currency.remainingMs / 1000)}s more)`;
    case 'ended':
      return 'no: its lease ended (expired or released); no later epoch yet, so a guard still accepts it until a later token writes';
    case 'superseded':
      return `no: superseded, the replicas are at epoch ${currency.epoch} for this resource; a guard refuses this token once a later one has written`;
    case 'unknown':
      return `cannot tell: ${currency.reason}`;
  }
}

/** Asks the replicas; every failure to reach them is an `unknown` with its reason, never an error. */
async function askReplicas(
  cluster: Cluster,
  identityPath: string,
  resource: string,
  epoch: bigint,
  timeoutMs: number,
): Promise<TokenCurrency> {
  const identity = loadIdentityFile(identityPath);
  const client = await QuorumFenceClient.connect(cluster, identity, {
    logger: createLogger('client', { level: 'silent', destination: 2 }),
    handshakeTimeoutMs: timeoutMs,
  });
  try {
    return tokenCurrency(epoch, await client.status(resource, { timeoutMs }), cluster);
  } catch (error) {
    return { state: 'unknown', reason: `asking the replicas failed: ${(error as Error).message}` };
  } finally {
    await client.close();
  }
}

/** The currency as --json prints it: epochs as decimal strings, as everywhere in the JSON output. */
function currencyJson(currency: TokenCurrency): Record<string, unknown> {
  return currency.state === 'superseded' ? { state: currency.state, epoch: currency.epoch.toString() } : currency;
}

export const command: Command = {
  summary: 'check an admission token offline, print its fields, and say whether it is still current',
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      {
        cluster: { type: 'string' },
        identity: { type: 'string' },
        offline: { type: 'boolean' },
        timeout: { type: 'string' },
        json: { type: 'boolean' },
      },
      { min: 1, max: 1 },
    );
    const cluster = loadClusterFile(clusterPathOf(values));
    const timeoutMs = parseDuration(values.timeout, 'timeout', DEFAULT_CURRENCY_TIMEOUT_MS);
    if (timeoutMs < 100 || timeoutMs > 60_000)
      throw new QuorumFenceError('INVALID_OPTION', `--timeout expects 100ms .. 60s, got "${values.timeout}"`);
    if (values.offline && values.identity !== undefined)
      throw new QuorumFenceError('INVALID_OPTION', '--identity asks the replicas and --offline does not: give one');
    const text = positionals[0] === '-' ? readFileSync(0, 'utf8').trim() : positionals[0]!;
    const check = checkToken(text, cluster);
    if (!check.ok) {
      const code = 'code' in check ? check.code : undefined;
      process.stdout.write(
        values.json
          ? JSON.stringify({ valid: false, reason: check.reason, ...(code ? { code } : {}), message: check.message }) +
              '\n'
          : `invalid token: ${check.reason}${code ? ` (${code})` : ''}: ${check.message}\n`,
      );
      return 1;
    }
    const { grant } = check.token;
    // An empty variable counts as unset, as for every client verb.
    const identityPath = values.identity ?? (process.env[IDENTITY_ENVIRONMENT_VARIABLE] || undefined);
    const currency: TokenCurrency = values.offline
      ? { state: 'unknown', reason: 'not asked (--offline)' }
      : identityPath === undefined
        ? {
            state: 'unknown',
            reason: `no identity to ask the replicas with (give --identity FILE or set $${IDENTITY_ENVIRONMENT_VARIABLE})`,
          }
        : await askReplicas(cluster, identityPath, grant.resource, grant.epoch, timeoutMs);
    const fields = {
      resource: grant.resource,
      epoch: grant.epoch.toString(),
      holder: toHex(grant.holder),
      clusterId: toHex(grant.clusterId),
      digest: toHex(tokenDigest(check.token)),
    };
    process.stdout.write(
      values.json
        ? JSON.stringify({ valid: true, ...fields, current: currencyJson(currency) }) + '\n'
        : `valid token\n  resource  ${fields.resource}\n  epoch     ${fields.epoch}\n  holder    ${fields.holder}\n  cluster   ${fields.clusterId}\n  digest    ${fields.digest}\n  current   ${currencyLine(currency)}\n`,
    );
    return 0;
  },
};
