/**
 * `quorumfence acquire RESOURCE`: get an admission token from the cluster and
 * print it (and, with --hold, keep the lease until Ctrl-C, then release it).
 */
import { QuorumFenceError } from '../common/errors.js';
import { createLogger } from '../common/log.js';
import { loadClusterFile, type Cluster } from '../cluster/description.js';
import { QuorumFenceClient } from '../client/client.js';
import type { AcquireRefusal } from '../client/acquire.js';
import { loadIdentityFile } from '../client/identity.js';
import { parseDuration, parseFlags, required, type Command } from '../command/args.js';

const usage = `usage: quorumfence acquire RESOURCE --cluster FILE --identity FILE [--ttl 10s] [--wait 5s] [--json] [--hold] [--resume]

Acquires a lease on RESOURCE from the replicas in the cluster description and
prints the admission token (text form) and its epoch. Guards accept the token
for writes to RESOURCE until a token with a larger epoch has written there.

Without --hold the lease is left to run out after --ttl (or to be taken over
once it has); with --hold the command keeps renewing it until Ctrl-C (or
SIGTERM), then releases it.

Each invocation is its own session (docs/protocol.md, "Sessions"): a lease
this identity holds from another invocation or process answers busy like any
other holder's, until it ends or is released. --resume is crash recovery: it
ends this identity's lease held under another session and acquires a new
epoch. The session is printed, for "quorumfence release --session".

Exit codes: 0 acquired; 1 not acquired (busy, unavailable, timeout, forbidden,
invalid) or the lease was lost while holding; 2 bad flags.

options:
  --cluster FILE    the cluster description (cluster.json)             (required)
  --identity FILE   the client identity (see "quorumfence identity new") (required)
  --ttl DURATION    lease length, e.g. 500ms, 10s, 1m                   (default 10s)
  --wait DURATION   how long to wait while another holder has it        (default 0)
  --json            print one JSON object instead of text
  --hold            keep the lease (renewing it) until interrupted, then release it
  --resume          end this identity's lease held by another session first (crash recovery)
`;

/**
 * Loads the cluster description a command was given, saying which file to pass when it cannot be read.
 * @throws QuorumFenceError IO_ERROR, and loadClusterFile's errors for a malformed description
 */
export function loadClusterForCommand(clusterPath: string): Cluster {
  try {
    return loadClusterFile(clusterPath);
  } catch (error) {
    if (error instanceof QuorumFenceError && error.code === 'IO_ERROR') {
      throw new QuorumFenceError(
        'IO_ERROR',
        `cannot read the cluster description ${clusterPath}; pass the cluster.json that "quorumfence keygen" wrote`,
      );
    }
    throw error;
  }
}

/** Loads the cluster and identity files and connects; shared with the status verb. */
export async function openClient(values: {
  cluster?: string | undefined;
  identity?: string | undefined;
  /** Speak for this earlier session (32 hex digits) instead of a fresh one. */
  session?: string | undefined;
}): Promise<QuorumFenceClient> {
  const clusterPath = required(values.cluster, 'cluster');
  const cluster = loadClusterForCommand(clusterPath);
  const identity = loadIdentityFile(required(values.identity, 'identity'));
  const client = await QuorumFenceClient.connect(cluster, identity, {
    logger: createLogger('client', { level: 'warn', destination: 2 }),
    ...(values.session === undefined ? {} : { session: values.session }),
  });
  const ready = client.replicas().filter((r) => r.state.phase === 'ready').length;
  if (ready === 0) {
    const failures = client.replicas().map((r) => `${r.endpoint}: ${r.state.lastFailure?.message ?? r.state.phase}`);
    await client.close();
    throw new QuorumFenceError(
      'CONNECTION_FAILED',
      `no replica of the cluster is reachable (${failures.join('; ')}); check that the replicas are running and that the endpoints in ${clusterPath} are right`,
    );
  }
  return client;
}

/** One line saying what went wrong and what to try. */
export function refusalHint(refusal: AcquireRefusal, client: QuorumFenceClient, resource: string): string {
  switch (refusal.reason) {
    case 'busy':
      return `${refusal.message}; wait longer with --wait ${Math.ceil((refusal.remainingMs + 1) / 1000)}s`;
    case 'unavailable':
      return `${refusal.message}; at least ${client.cluster.t} of the ${client.cluster.n} replicas must be running and reachable`;
    case 'timeout':
      return `${refusal.message}; the replicas are slow or the resource is heavily contended: try a larger --wait`;
    case 'forbidden':
      return `${refusal.message}; add this identity (${client.identity.publicKeyHex}) with a prefix of "${resource}" to the replicas' access config (--config)`;
    case 'invalid':
      return `${refusal.message}; check --ttl against the replicas' --min-ttl/--max-ttl`;
    case 'aborted':
      return refusal.message;
  }
}

export const command: Command = {
  summary: 'acquire a lease on a resource and print its admission token',
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      {
        cluster: { type: 'string' },
        identity: { type: 'string' },
        ttl: { type: 'string' },
        wait: { type: 'string' },
        json: { type: 'boolean' },
        hold: { type: 'boolean' },
        resume: { type: 'boolean' },
      },
      { min: 1, max: 1 },
    );
    const resource = positionals[0]!;
    const ttlMs = parseDuration(values.ttl, 'ttl', 10_000);
    const waitMs = parseDuration(values.wait, 'wait', 0);
    const client = await openClient(values);
    const interrupted = new AbortController();
    const onSignal = () => interrupted.abort();
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    try {
      const result = await client.acquire(resource, {
        ttlMs,
        waitMs,
        signal: interrupted.signal,
        autoRenew: values.hold === true,
        resume: values.resume === true,
      });
      if (!result.ok) {
        if (values.json)
          process.stdout.write(
            JSON.stringify({ ok: false, reason: result.reason, message: result.message, faults: result.faults }) + '\n',
          );
        else process.stderr.write(`quorumfence acquire: ${result.reason}: ${refusalHint(result, client, resource)}\n`);
        return 1;
      }
      const lease = result.lease;
      if (values.json) {
        process.stdout.write(
          JSON.stringify({
            ok: true,
            resource,
            epoch: lease.epoch.toString(),
            token: lease.tokenText,
            holder: lease.holderHex,
            session: client.session,
            ttlMs,
            signers: lease.signers,
            faults: result.faults,
          }) + '\n',
        );
      } else {
        process.stdout.write(
          `resource  ${resource}\nepoch     ${lease.epoch}\nholder    ${lease.holderHex}\nsession   ${client.session}\nttl       ${ttlMs} ms\ntoken     ${lease.tokenText}\n`,
        );
        for (const fault of result.faults)
          process.stderr.write(`warning: replica ${fault.replica} misbehaved (${fault.kind}): ${fault.message}\n`);
      }
      if (!values.hold) return 0;

      process.stderr.write(`holding the lease on "${resource}" (renewing); press Ctrl-C to release\n`);
      const ended = await new Promise<'interrupted' | 'lost'>((resolveEnd) => {
        if (interrupted.signal.aborted) return resolveEnd('interrupted');
        interrupted.signal.addEventListener('abort', () => resolveEnd('interrupted'), { once: true });
        lease.once('lost', () => resolveEnd('lost'));
      });
      if (ended === 'lost') {
        process.stderr.write(
          `quorumfence acquire: lost the lease on "${resource}": ${lease.ended?.reason} (${lease.ended?.message})\n`,
        );
        return 1;
      }
      const released = await lease.release();
      process.stderr.write(
        released.ok
          ? `released "${resource}" at epoch ${lease.epoch}\n`
          : `release of "${resource}" not confirmed (${released.reason}): ${released.message}; the lease ends by itself after the ttl\n`,
      );
      return 0;
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      // Without --hold the lease stays with the replicas until its ttl: that is the point of printing the token.
      for (const lease of client.leases()) lease.clientClosed();
      await client.close();
    }
  },
};
