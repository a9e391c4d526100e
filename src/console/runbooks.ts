/**
 * What to do, per situation the console's status line names (situation.ts): short steps shown on the page itself
 * (section "Runbooks", each at #runbook-<id>), so an operator paged at night reads them beside the figures, with the
 * longer text each points to in docs/ (which ship with the package). test/unit/console-situation.test.ts checks that
 * every section named here exists.
 */

export type RunbookId =
  | 'acquires-failing'
  | 'replica-down'
  | 'replica-hung'
  | 'replica-faulty'
  | 'console-refused'
  | 'leases-at-risk'
  | 'lease-list-cut'
  | 'flush-slow'
  | 'refusal-spike';

export interface Runbook {
  readonly id: RunbookId;
  readonly title: string;
  readonly steps: readonly string[];
  /** The longer text: a file under docs/ and the heading of its section. */
  readonly docs: { readonly file: string; readonly heading: string };
}

export const RUNBOOKS: readonly Runbook[] = [
  {
    id: 'acquires-failing',
    title: 'Acquires are failing: fewer than t replicas answer honestly',
    steps: [
      'Bring back the replicas the status line names, each on its own volume: acquires work again as soon as t replicas are available. Do not replace a replica that is only unreachable.',
      'Kubernetes: kubectl -n quorumfence get pods -l app.kubernetes.io/component=replica, then describe pod and logs -c replica for each one named.',
      'Tokens already issued keep working at guards. Holders whose renewals fail lose their lease and acquire again once the cluster is back.',
      'Drain no node and roll no replica until the margin is back above 0.',
    ],
    docs: { file: 'docs/operations.md', heading: '`QuorumFenceQuorumMarginExhausted`' },
  },
  {
    id: 'replica-down',
    title: 'A replica is down: its connection is refused or closed',
    steps: [
      'Nothing listens at its address: the process crashed, was killed (OOM), is crash-looping, or its node is gone.',
      'Look at its pod (kubectl describe pod, events) and its logs: a replica that refuses to start prints one line naming the code (STORE_CORRUPT, SHARE_MISMATCH, CLUSTER_MISMATCH, ...).',
      'Restart it on its own volume, never on an empty one. After a restart it answers busy for the resources in its signing record for --max-ttl, by design.',
    ],
    docs: { file: 'docs/operations.md', heading: '`QuorumFenceReplicaDown`' },
  },
  {
    id: 'replica-hung',
    title: 'A replica is hung: its connection is open but it does not answer',
    steps: [
      'It accepts connections and answers nothing within the console’s --timeout: a stopped process (SIGSTOP, a debugger), an overloaded or swapping node, a disk that blocks its fsync, or a network path that drops packets.',
      'Check its node’s CPU, memory and disk, its fsync figures on this page, and whether the process is stopped (ps -o stat shows T).',
      'If it does not recover within a minute, restart it on its own volume. It is not faulty: do not replace it.',
    ],
    docs: { file: 'docs/operations.md', heading: '`QuorumFenceQuorumMarginExhausted`' },
  },
  {
    id: 'replica-faulty',
    title: 'A replica is proven faulty',
    steps: [
      'Download its evidence from the Evidence table and save it: the first proof of each kind stays listed.',
      'Take it out of service so that it signs nothing more (Kubernetes: scale its StatefulSet to 0).',
      'Replace its share by a reshare, and treat its node and volume as compromised until you know why. An endpoint in cluster.json that points at another cluster’s replica convicts too (kind identity).',
      'Act before a second replica misbehaves: safety holds while at most f do.',
    ],
    docs: { file: 'docs/operations.md', heading: '`QuorumFenceReplicaFaulty`' },
  },
  {
    id: 'console-refused',
    title: 'A replica refuses the console’s identity',
    steps: [
      'The replica refused the console’s login (UNAUTHENTICATED): its access rules (--config) do not name the console’s public key.',
      'Add the console’s key (quorumfence identity show) with the prefix "" so that it sees every resource, and restart the replica on its own volume.',
      'The replica may be serving clients normally: quorumfence health asks it directly.',
    ],
    docs: { file: 'docs/console.md', heading: 'Limits' },
  },
  {
    id: 'leases-at-risk',
    title: 'Leases at risk: listed by fewer than t replicas',
    steps: [
      'A renewal needs t replicas that hold the lease. A lease fewer list ends at its time left unless replicas come back.',
      'Bring back the unreachable replicas. Holders whose lease ends acquire again.',
    ],
    docs: { file: 'docs/console.md', heading: 'The page' },
  },
  {
    id: 'lease-list-cut',
    title: 'The lease list is cut',
    steps: [
      'A replica lists at most 32 running leases per answer, those ending last, and says when it left some out. Leases ending sooner are not shown here, nor flagged at risk.',
      'Give the console --watch RESOURCE for each resource you must always see (shown under Watched resources), or run quorumfence status RESOURCE.',
      'Many leases held by one identity: the holder column names it; check its access rules.',
    ],
    docs: { file: 'docs/console.md', heading: 'Limits' },
  },
  {
    id: 'flush-slow',
    title: 'Slow fsync on a replica',
    steps: [
      'Every grant waits for its record’s fsync, so this replica answers last; acquires slow down once f+1 replicas are slow.',
      'Check its volume (storage class, IOPS limits, a noisy neighbour).',
      'Move it to faster storage with quorumfence replica export / import while it is stopped, never onto an empty volume.',
    ],
    docs: { file: 'docs/operations.md', heading: '`QuorumFenceFlushLatencyHigh`' },
  },
  {
    id: 'refusal-spike',
    title: 'A replica refuses many requests of a client',
    steps: [
      'invalid, forbidden, too_far and not_holder point at a client: another version, a key outside the access rules, a client steering epochs, renewals by a key that does not hold the lease.',
      'The replica’s logs name the holder key and resource of each refusal (event refusal). Find that client and fix or block it.',
      'On every replica at once it is a client; on one replica alone, look at that replica’s access rules and version.',
    ],
    docs: { file: 'docs/operations.md', heading: '`QuorumFenceRefusalSpike`' },
  },
];
