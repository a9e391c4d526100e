/**
 * `quorumfence acquire RESOURCE`: get an admission token from the cluster and
 * print it (and, with --hold, keep the lease until Ctrl-C, then release it).
 */
import { parseDuration, parseFlags, resourceArgument, type Command } from '../command/args.js';
import { CLIENT_FLAGS, CLUSTER_FLAG_USAGE, IDENTITY_FLAG_USAGE, openClient, refusalLine } from './client-flags.js';

/** A lease's length when --ttl is not given. */
export const DEFAULT_TTL_MS = 10_000;

const usage = `usage: quorumfence acquire RESOURCE [--cluster FILE] [--identity FILE] [--ttl 10s] [--wait 5s] [--json] [--hold] [--resume]

Acquires a lease on RESOURCE from the replicas in the cluster description and
prints the admission token (text form) and its epoch. Guards accept the token
for writes to RESOURCE until a token with a larger epoch has written there.

Without --hold the lease is left to run out after --ttl (or to be taken over
once it has; "quorumfence release RESOURCE EPOCH" ends it sooner); with --hold
the command keeps renewing it until Ctrl-C (or SIGTERM), then releases it.
To run a command while holding a lease, see "quorumfence lock".

Each invocation is its own session (docs/protocol.md, "Sessions"): a lease
this identity holds from another invocation or process answers busy like any
other holder's, until it ends or is released. --resume is crash recovery: it
ends this identity's lease held under another session and acquires a new
epoch. The session is printed, for "quorumfence release --session".

Exit codes: 0 acquired; 1 not acquired (busy, unavailable, timeout, forbidden,
invalid) or the lease was lost while holding; 2 bad flags.

options:
${CLUSTER_FLAG_USAGE}
${IDENTITY_FLAG_USAGE}
  --ttl DURATION    lease length, e.g. 500ms, 10s, 1m (a unit is required) (default 10s)
  --wait DURATION   how long to wait while another holder has it        (default 0)
  --json            print one JSON object instead of text
  --hold            keep the lease (renewing it) until interrupted, then release it
  --resume          end this identity's lease held by another session first (crash recovery)
`;

export const command: Command = {
  summary: 'acquire a lease on a resource and print its admission token',
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      {
        ...CLIENT_FLAGS,
        ttl: { type: 'string' },
        wait: { type: 'string' },
        json: { type: 'boolean' },
        hold: { type: 'boolean' },
        resume: { type: 'boolean' },
      },
      { min: 1, max: 1 },
    );
    const resource = resourceArgument(positionals[0]!);
    const ttlMs = parseDuration(values.ttl, 'ttl', DEFAULT_TTL_MS);
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
        else process.stderr.write(await refusalLine('acquire', result, client, resource));
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
          `quorumfence acquire: lost the lease on "${resource}": ${lease.ended?.reason} (${lease.ended?.message}) (LEASE_LOST)\n`,
        );
        return 1;
      }
      // Waits for the replicas' answers: the line it prints says whether t confirmed.
      const released = await lease.release({ wait: true });
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
