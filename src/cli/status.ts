/** `quorumfence status RESOURCE`: each replica's view of a resource (epoch, lease), and the quorum's. */
import { toHex } from '../common/bytes.js';
import type { ResourceStatus } from '../client/status.js';
import { CLIENT_FLAGS, CLUSTER_FLAG_USAGE, IDENTITY_FLAG_USAGE, openClient } from './client-flags.js';
import { parseDuration, parseFlags, resourceArgument, type Command } from '../command/args.js';

const usage = `usage: quorumfence status RESOURCE [--cluster FILE] [--identity FILE] [--timeout 2s] [--json]

Asks every replica for its view of RESOURCE: the highest epoch it signed,
whether a lease is running and for how long, or why it could not answer
(unreachable, faulty, refused, timeout). The summary line applies the same
rules acquire does, so up to f lying replicas cannot skew it. Signs nothing.

Exit codes: 0 when at least 2f+1 replicas answered; 1 otherwise; 2 bad flags.

options:
${CLUSTER_FLAG_USAGE}
${IDENTITY_FLAG_USAGE}
                    (replicas answer authenticated clients only)
  --timeout DURATION  how long to wait for answers                     (default 2s)
  --json            print one JSON object instead of a table
`;

function toJson(status: ResourceStatus): unknown {
  return {
    resource: status.resource,
    epoch: status.epoch?.toString() ?? null,
    leased: status.leased,
    remainingMs: status.remainingMs ?? null,
    answered: status.answered,
    replicas: status.replicas.map((v) => (v.state === 'ok' ? { ...v, epoch: v.epoch.toString() } : v)),
  };
}

export const command: Command = {
  summary: "show each replica's view of a resource",
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      {
        ...CLIENT_FLAGS,
        timeout: { type: 'string' },
        json: { type: 'boolean' },
      },
      { min: 1, max: 1 },
    );
    const resource = resourceArgument(positionals[0]!);
    const timeoutMs = parseDuration(values.timeout, 'timeout', 2000);
    const client = await openClient(values);
    try {
      const status = await client.status(resource, { timeoutMs });
      const enough = status.answered >= 2 * client.cluster.f + 1;
      if (values.json) {
        process.stdout.write(JSON.stringify(toJson(status)) + '\n');
        return enough ? 0 : 1;
      }
      const summary = !enough
        ? `only ${status.answered} of ${client.cluster.n} replicas answered (${2 * client.cluster.f + 1} needed for a quorum view)`
        : `epoch ${status.epoch}, ${status.leased ? `leased, about ${status.remainingMs} ms left` : 'free'}`;
      const lines = [
        `resource ${JSON.stringify(resource)} on cluster ${toHex(client.cluster.id).slice(0, 16)}…: ${summary}`,
        'replica  endpoint                      view',
      ];
      for (const v of status.replicas) {
        const view =
          v.state === 'ok'
            ? `epoch ${v.epoch}, ${v.leased ? `leased (${v.remainingMs} ms left)` : 'free'}`
            : `${v.state}: ${v.message}`;
        lines.push(`${String(v.replica).padEnd(8)} ${v.endpoint.padEnd(29)} ${view}`);
      }
      process.stdout.write(lines.join('\n') + '\n');
      return enough ? 0 : 1;
    } finally {
      await client.close();
    }
  },
};
