/**
 * Who can reach what in deploy/kubernetes, checked on the parsed objects: no Service is reachable from
 * outside the cluster; the console runs alone, mounts nothing of a replica's and reads the public
 * cluster.json; the NetworkPolicies admit to a replica only clients and the scraper (its protocol port)
 * and the other replicas (its ceremony port), and to the console only the scraper; and the Prometheus
 * Operator's objects (deploy/kubernetes/prometheus-operator) scrape the jobs the alert rules name, with
 * the replicas' certificates verified as the plain scrape config does.
 */
import type { Rule } from './kubernetes-manifests.js';
import { portNames, secretsOf, selects, type KubeObject, type PodSpec, type Workload } from './kubernetes-objects.js';

type Report = (rule: Rule, message: string) => void;

/** The pod label the replicas' NetworkPolicy admits clients by (deploy/kubernetes/network-policies.yaml). */
export const CLIENT_LABEL = 'quorumfence/client';
/** The Service label a ServiceMonitor selects and names its job after (jobLabel). */
export const SCRAPE_JOB_LABEL = 'quorumfence/scrape-job';
/** The jobs the alert rules and the dashboard name. */
export const SCRAPE_JOBS = ['quorumfence-replicas', 'quorumfence-resource', 'quorumfence-console'] as const;

interface LabelSelector {
  matchLabels?: Record<string, string>;
}
interface PolicyPeer {
  namespaceSelector?: LabelSelector;
  podSelector?: LabelSelector;
  ipBlock?: unknown;
}
interface PolicyRule {
  from?: PolicyPeer[];
  ports?: { port?: number | string; protocol?: string }[];
}
interface PolicySpec {
  podSelector?: LabelSelector;
  policyTypes?: string[];
  ingress?: PolicyRule[];
}

type PeerKind = 'client' | 'scraper' | 'replica';

function containerPort(pod: PodSpec, name: string, init = false): number | undefined {
  const containers = init ? (pod.initContainers ?? []) : pod.containers;
  return containers.flatMap((c) => c.ports ?? []).find((p) => p.name === name)?.containerPort;
}

/** What a NetworkPolicy peer admits, in the deployment's terms, or undefined for anything else. */
function peerKind(
  peer: PolicyPeer,
  replicas: readonly Workload[],
  workloads: readonly Workload[],
): PeerKind | undefined {
  if (peer.ipBlock !== undefined) return undefined;
  const pods = peer.podSelector?.matchLabels ?? {};
  const namespaces = peer.namespaceSelector?.matchLabels;
  if (peer.namespaceSelector && Object.keys(pods).length === 1 && pods[CLIENT_LABEL] === 'true') return 'client';
  if (namespaces && Object.keys(namespaces).length > 0 && Object.keys(pods).length > 0 && !(CLIENT_LABEL in pods))
    return 'scraper';
  // The other replicas: a same-namespace selector that picks every replica pod and no other workload's.
  if (
    !peer.namespaceSelector &&
    Object.keys(pods).length > 0 &&
    workloads.every((w) => selects(pods, w.podLabels) === replicas.includes(w))
  )
    return 'replica';
  return undefined;
}

/** Every NetworkPolicy that selects a pod with `labels` for ingress. */
function ingressPoliciesOf(objects: readonly KubeObject[], labels: Record<string, string>): KubeObject[] {
  return objects.filter((o) => {
    if (o.kind !== 'NetworkPolicy') return false;
    const spec = o.spec as PolicySpec;
    return selects(spec.podSelector?.matchLabels, labels) && (spec.policyTypes ?? ['Ingress']).includes('Ingress');
  });
}

/**
 * Checks the ingress allowed to the pods of `workload`: every rule names its peers and ports, and each peer
 * kind may use only its ports; `required` kinds must be admitted.
 */
function checkIngress(
  objects: readonly KubeObject[],
  workload: Workload,
  allowed: Partial<Record<PeerKind, number>>,
  context: { replicas: readonly Workload[]; workloads: readonly Workload[] },
  report: Report,
): void {
  const policies = ingressPoliciesOf(objects, workload.podLabels);
  if (policies.length === 0) {
    report('network-policy', `${workload.id}: no NetworkPolicy limits who reaches it`);
    return;
  }
  const admitted = new Set<PeerKind>();
  for (const policy of policies) {
    for (const [k, rule] of ((policy.spec as PolicySpec).ingress ?? []).entries()) {
      const where = `NetworkPolicy/${policy.metadata.name} ingress[${k}]`;
      if (!rule.from?.length || !rule.ports?.length) {
        report('network-policy', `${where}: admits every peer or every port`);
        continue;
      }
      for (const peer of rule.from) {
        const kind = peerKind(peer, context.replicas, context.workloads);
        const port = kind === undefined ? undefined : allowed[kind];
        if (kind === undefined || port === undefined) {
          report('network-policy', `${where}: a peer that is not ${Object.keys(allowed).join(' or ')}`);
          continue;
        }
        if (rule.ports.some((p) => p.port !== port))
          report('network-policy', `${where}: a ${kind} may reach only port ${port}`);
        admitted.add(kind);
      }
    }
  }
  for (const kind of Object.keys(allowed) as PeerKind[])
    if (!admitted.has(kind)) report('network-policy', `${workload.id}: no ingress rule admits the ${kind}`);
}

/** Services only inside the cluster, the console's isolation, and the NetworkPolicies. */
export function checkExposure(
  objects: readonly KubeObject[],
  context: {
    readonly workloads: readonly Workload[];
    readonly replicas: readonly Workload[];
    readonly consoles: readonly Workload[];
    readonly replicaSecrets: ReadonlySet<string>;
  },
  report: Report,
): void {
  for (const service of objects.filter((o) => o.kind === 'Service')) {
    const spec = service.spec as {
      type?: string;
      externalIPs?: unknown[];
      ports?: { nodePort?: number }[];
    };
    if (
      (spec.type ?? 'ClusterIP') !== 'ClusterIP' ||
      (spec.externalIPs?.length ?? 0) > 0 ||
      spec.ports?.some((p) => p.nodePort !== undefined)
    )
      report('service-exposure', `Service/${service.metadata.name} is reachable from outside the cluster`);
  }

  const { replicas, consoles, workloads } = context;
  if (consoles.length !== 1 || consoles[0]!.pods !== 1)
    report('console-isolation', `${consoles.length} console workloads: expected one, running one pod`);
  for (const console of consoles) {
    for (const secret of secretsOf(console.pod))
      if (context.replicaSecrets.has(secret) || /replica/.test(secret))
        report('console-isolation', `${console.id} mounts replica Secret ${secret}`);
    for (const volume of console.pod.volumes ?? [])
      if (volume.persistentVolumeClaim)
        report('console-isolation', `${console.id} mounts a volume claim: it keeps nothing`);
    const args = console.pod.containers.flatMap((c) => c.args ?? []);
    const cluster = args[args.indexOf('--cluster') + 1];
    const mount = console.pod.containers
      .flatMap((c) => c.volumeMounts ?? [])
      .find((m) => cluster?.startsWith(m.mountPath + '/'));
    if (!console.pod.volumes?.find((v) => v.name === mount?.name)?.configMap)
      report('console-isolation', `${console.id}: --cluster ${cluster} is not read from a ConfigMap`);
    // The console is a client: the replicas' policy must admit it.
    if (console.podLabels[CLIENT_LABEL] !== 'true')
      report('network-policy', `${console.id}: its pods lack ${CLIENT_LABEL}=true, so no replica admits it`);
    const port = portNames(console.pod).get('console');
    if (port === undefined) report('console-isolation', `${console.id}: no container port named console`);
    else checkIngress(objects, console, { scraper: port }, { replicas, workloads }, report);
  }

  for (const replica of replicas) {
    const clientPort = containerPort(replica.pod, 'replica');
    const ceremonyPort = containerPort(replica.pod, 'ceremony', true);
    if (clientPort === undefined || ceremonyPort === undefined) {
      report('network-policy', `${replica.id}: no ports named replica and ceremony`);
      continue;
    }
    checkIngress(
      objects,
      replica,
      { client: clientPort, scraper: clientPort, replica: ceremonyPort },
      { replicas, workloads },
      report,
    );
  }
}

interface MonitorEndpoint {
  port?: string;
  path?: string;
  scheme?: string;
  honorLabels?: boolean;
  tlsConfig?: { ca?: unknown; serverName?: string; insecureSkipVerify?: boolean };
  relabelings?: { sourceLabels?: string[]; targetLabel?: string }[];
}

/** Whether `value` holds `key` anywhere (objects and arrays, at any depth). */
function holdsKey(value: unknown, key: string): boolean {
  if (Array.isArray(value)) return value.some((item) => holdsKey(item, key));
  if (typeof value !== 'object' || value === null) return false;
  return Object.entries(value).some(([k, v]) => k === key || holdsKey(v, key));
}

/**
 * The Prometheus Operator's ServiceMonitors against the Services of `base` and the plain scrape config: one
 * monitor per job, each selecting Services of its job only, on ports they have, named by jobLabel; the
 * replicas scraped over https with the CA and the server name the scrape config uses; certificate checks on
 * everywhere.
 */
export function checkMonitoring(
  monitoring: readonly KubeObject[],
  base: readonly KubeObject[],
  scrapeConfig: { scrape_configs: { job_name: string; tls_config?: { ca_file?: string; server_name?: string } }[] },
): { rule: 'monitoring'; message: string }[] {
  const findings: { rule: 'monitoring'; message: string }[] = [];
  const report = (message: string) => findings.push({ rule: 'monitoring', message });
  const services = base.filter((o) => o.kind === 'Service');
  const jobs = new Set(scrapeConfig.scrape_configs.map((job) => job.job_name));
  for (const job of SCRAPE_JOBS) if (!jobs.has(job)) report(`the scrape config has no job ${job}`);
  if (holdsKey(scrapeConfig, 'insecure_skip_verify')) report('the scrape config skips a certificate check');
  const replicaJob = scrapeConfig.scrape_configs.find((job) => job.job_name === 'quorumfence-replicas');
  if (!replicaJob?.tls_config?.ca_file || !replicaJob.tls_config.server_name)
    report('the scrape config verifies the replicas without a CA file or server name');

  const monitors = monitoring.filter((o) => o.kind === 'ServiceMonitor');
  for (const job of SCRAPE_JOBS) {
    const mine = monitors.filter((m) => {
      const selector = (m.spec as { selector?: LabelSelector }).selector?.matchLabels;
      return selector?.[SCRAPE_JOB_LABEL] === job;
    });
    if (mine.length !== 1) {
      report(`${mine.length} ServiceMonitors for job ${job}, not 1`);
      continue;
    }
    const monitor = mine[0]!;
    const spec = monitor.spec as { jobLabel?: string; selector: LabelSelector; endpoints?: MonitorEndpoint[] };
    const selected = services.filter((s) => selects(spec.selector.matchLabels, s.metadata.labels ?? {}));
    if (selected.length === 0) report(`ServiceMonitor/${monitor.metadata.name} selects no Service`);
    for (const service of selected) {
      if (spec.jobLabel === undefined || service.metadata.labels?.[spec.jobLabel] !== job)
        report(`ServiceMonitor/${monitor.metadata.name}: Service/${service.metadata.name} would not be job ${job}`);
      const ports = ((service.spec as { ports?: { name?: string }[] }).ports ?? []).map((p) => p.name);
      for (const endpoint of spec.endpoints ?? [])
        if (!ports.includes(endpoint.port))
          report(
            `ServiceMonitor/${monitor.metadata.name}: Service/${service.metadata.name} has no port ${endpoint.port}`,
          );
    }
    if (holdsKey(spec, 'insecureSkipVerify'))
      report(`ServiceMonitor/${monitor.metadata.name} skips a certificate check`);
    if (job === 'quorumfence-replicas') {
      const endpoint = spec.endpoints?.[0];
      if (
        endpoint?.scheme !== 'https' ||
        !endpoint.tlsConfig?.ca ||
        endpoint.tlsConfig.serverName !== replicaJob?.tls_config?.server_name
      )
        report(`ServiceMonitor/${monitor.metadata.name}: not https with the CA and the scrape config's server name`);
      if (endpoint?.honorLabels !== true || !endpoint.relabelings?.some((r) => r.targetLabel === 'replica'))
        report(`ServiceMonitor/${monitor.metadata.name}: the replicas' own labels and the replica number are not kept`);
    }
  }
  return findings;
}
