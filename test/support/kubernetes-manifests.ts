/**
 * Reads the manifests under deploy/kubernetes and checks the deployment's invariants on the parsed
 * objects (no cluster needed): who mounts which Secret and volume, the disruption budget against
 * N = 3f+1, anti-affinity, probes and scrape annotations, the console's isolation, that no Service
 * is reachable from outside the cluster, and the NetworkPolicies (checkNetworkPolicies) and the
 * Prometheus Operator's objects (checkMonitoring). Each finding names its rule, so a test that
 * breaks one invariant on purpose can assert which rule caught it.
 */
import {
  allContainers,
  portNames,
  secretsOf,
  selects,
  workloadsOf,
  type KubeObject,
  type Workload,
} from './kubernetes-objects.js';
import { checkExposure } from './kubernetes-exposure.js';

export { loadManifestFiles, secretsOf, type KubeObject, type ManifestFile } from './kubernetes-objects.js';

export type Rule =
  | 'replica-count'
  | 'replica-scale'
  | 'secret-shared'
  | 'secret-per-replica'
  | 'pvc-per-replica'
  | 'disruption-budget'
  | 'anti-affinity'
  | 'probe'
  | 'scrape'
  | 'resource-isolation'
  | 'service-per-replica'
  | 'security-context'
  | 'resources'
  | 'console-isolation'
  | 'service-exposure'
  | 'network-policy'
  | 'monitoring';

export interface Finding {
  readonly rule: Rule;
  readonly message: string;
}

export interface CheckResult {
  readonly findings: Finding[];
  /** N: the replica workloads found. */
  readonly n: number;
  /** f = (N - 1) / 3 when N = 3f+1, else undefined. */
  readonly f: number | undefined;
}

/** The PVC names a StatefulSet's pod `<name>-0` gets from its claim templates. */
function claimNamesOf(workload: Workload): string[] {
  return workload.claimTemplates.map((t) => `${t}-${workload.object.metadata.name}-0`);
}

/**
 * Checks the deployment's invariants over every parsed object. Replica workloads are those whose
 * pods carry `app.kubernetes.io/component: replica`; the resource's, `resource`.
 */
export function checkManifests(objects: readonly KubeObject[]): CheckResult {
  const findings: Finding[] = [];
  const report = (rule: Rule, message: string): void => {
    findings.push({ rule, message });
  };
  const workloads = workloadsOf(objects);
  const replicas = workloads.filter((w) => w.component === 'replica');
  const n = replicas.length;
  const f = n >= 4 && (n - 1) % 3 === 0 ? (n - 1) / 3 : undefined;
  if (f === undefined) report('replica-count', `${n} replica workloads: N must be 3f+1 with f >= 1`);

  // Secrets: each mounted by one workload that runs one pod.
  const mountedBy = new Map<string, string[]>();
  for (const workload of workloads) {
    for (const secret of secretsOf(workload.pod)) {
      mountedBy.set(secret, [...(mountedBy.get(secret) ?? []), workload.id]);
      if (workload.pods !== 1)
        report('secret-shared', `Secret ${secret} is mounted by ${workload.id}, which runs ${workload.pods} pods`);
    }
  }
  for (const [secret, users] of mountedBy) {
    if (users.length > 1) report('secret-shared', `Secret ${secret} is mounted by ${users.join(', ')}`);
  }

  const replicaSecrets = new Set<string>();
  const replicaClaims = new Set<string>();
  for (const replica of replicas) {
    if (replica.object.kind !== 'StatefulSet' || replica.pods !== 1)
      report(
        'replica-scale',
        `${replica.id}: a replica is a StatefulSet with replicas: 1 (one pod per signing record)`,
      );
    const secrets = [...secretsOf(replica.pod)];
    if (secrets.length !== 1) report('secret-per-replica', `${replica.id} mounts ${secrets.length} Secrets, not 1`);
    for (const secret of secrets) replicaSecrets.add(secret);

    if (replica.claimTemplates.length !== 1)
      report('pvc-per-replica', `${replica.id} has ${replica.claimTemplates.length} volume claim templates, not 1`);
    for (const claim of claimNamesOf(replica)) replicaClaims.add(claim);
    const dataMount = replica.pod.containers
      .flatMap((c) => c.volumeMounts ?? [])
      .find((m) => replica.claimTemplates.includes(m.name));
    const dataFlag = replica.pod.containers.flatMap((c) => {
      const args = c.args ?? [];
      const at = args.indexOf('--data');
      return at >= 0 ? [args[at + 1]] : [];
    })[0];
    if (!dataMount || dataMount.mountPath !== dataFlag)
      report('pvc-per-replica', `${replica.id}: --data ${dataFlag} is not where its claim is mounted`);

    const terms = replica.pod.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution ?? [];
    const spread = terms.some(
      (term) =>
        term.topologyKey === 'kubernetes.io/hostname' &&
        replicas.every((other) => selects(term.labelSelector?.matchLabels, other.podLabels)),
    );
    if (!spread)
      report(
        'anti-affinity',
        `${replica.id}: no required anti-affinity on kubernetes.io/hostname against every replica`,
      );

    const services = objects.filter(
      (o) =>
        o.kind === 'Service' &&
        (o.spec as { clusterIP?: string }).clusterIP !== 'None' &&
        selects((o.spec as { selector?: Record<string, string> }).selector, replica.podLabels) &&
        replicas.filter((r) => selects((o.spec as { selector?: Record<string, string> }).selector, r.podLabels))
          .length === 1,
    );
    if (services.length === 0) report('service-per-replica', `${replica.id}: no Service selects this replica alone`);
  }
  if (replicaSecrets.size !== n)
    report('secret-per-replica', `${replicaSecrets.size} distinct replica Secrets for ${n} replicas`);
  if (replicaClaims.size !== n)
    report('pvc-per-replica', `${replicaClaims.size} distinct replica claims for ${n} replicas`);

  // The disruption budget: at most f replicas down by choice.
  const budgets = objects.filter(
    (o) =>
      o.kind === 'PodDisruptionBudget' &&
      replicas.some((r) =>
        selects((o.spec as { selector?: { matchLabels?: Record<string, string> } }).selector?.matchLabels, r.podLabels),
      ),
  );
  if (budgets.length !== 1)
    report('disruption-budget', `${budgets.length} disruption budgets cover the replicas, not 1`);
  for (const budget of budgets) {
    const spec = budget.spec as { maxUnavailable?: unknown; selector?: { matchLabels?: Record<string, string> } };
    if (spec.maxUnavailable !== f)
      report('disruption-budget', `${budget.metadata.name}: maxUnavailable ${String(spec.maxUnavailable)}, f is ${f}`);
    const covered = replicas.filter((r) => selects(spec.selector?.matchLabels, r.podLabels)).length;
    if (covered !== n) report('disruption-budget', `${budget.metadata.name} covers ${covered} of ${n} replicas`);
  }

  // The resource: only public inputs; no replica Secret, no replica volume.
  const resources = workloads.filter((w) => w.component === 'resource');
  if (resources.length === 0) report('resource-isolation', 'no resource workload');
  for (const resource of resources) {
    for (const secret of secretsOf(resource.pod)) {
      if (replicaSecrets.has(secret) || /replica/.test(secret))
        report('resource-isolation', `${resource.id} mounts replica Secret ${secret}`);
    }
    for (const volume of resource.pod.volumes ?? []) {
      const claim = volume.persistentVolumeClaim?.claimName;
      if (claim && (replicaClaims.has(claim) || /replica/.test(claim)))
        report('resource-isolation', `${resource.id} mounts replica volume ${claim}`);
    }
    const clusterFlag = resource.pod.containers.flatMap((c) => {
      const at = (c.args ?? []).indexOf('--cluster');
      return at >= 0 ? [c.args![at + 1]!] : [];
    })[0];
    const clusterMount = resource.pod.containers
      .flatMap((c) => c.volumeMounts ?? [])
      .find((m) => clusterFlag?.startsWith(m.mountPath + '/'));
    const clusterVolume = resource.pod.volumes?.find((v) => v.name === clusterMount?.name);
    if (!clusterVolume?.configMap)
      report('resource-isolation', `${resource.id}: --cluster ${clusterFlag} is not read from a ConfigMap`);
  }

  // Probes, scrape annotations, security and resources on every served workload (the console's probe
  // path is its own: it has no /healthz).
  const consoles = workloads.filter((w) => w.component === 'console');
  for (const workload of [...replicas, ...resources, ...consoles]) {
    const ports = portNames(workload.pod);
    const probePath = workload.component === 'console' ? '/api/state' : '/healthz';
    for (const container of workload.pod.containers) {
      for (const [kind, probe] of [
        ['readiness', container.readinessProbe],
        ['liveness', container.livenessProbe],
      ] as const) {
        const get = probe?.httpGet;
        if (get?.path !== probePath || get.port === undefined || !ports.has(get.port))
          report('probe', `${workload.id}/${container.name}: ${kind} probe is not GET ${probePath} on an exposed port`);
      }
    }
    const a = workload.podAnnotations;
    const scrapePort = Number(a['prometheus.io/port']);
    if (a['prometheus.io/scrape'] !== 'true' || a['prometheus.io/path'] !== '/metrics')
      report('scrape', `${workload.id}: not annotated for scraping /metrics`);
    if (![...ports.values()].includes(scrapePort))
      report('scrape', `${workload.id}: prometheus.io/port ${a['prometheus.io/port']} is no port a container exposes`);

    const podSecurity = workload.pod.securityContext;
    if (podSecurity?.runAsNonRoot !== true || !podSecurity.runAsUser)
      report('security-context', `${workload.id}: the pod does not run as a non-root user`);
    for (const container of allContainers(workload.pod)) {
      const s = container.securityContext;
      if (s?.allowPrivilegeEscalation !== false || s.readOnlyRootFilesystem !== true)
        report('security-context', `${workload.id}/${container.name}: privilege escalation or a writable root`);
      const r = container.resources;
      if (!r?.requests?.cpu || !r.requests.memory || !r.limits?.memory)
        report('resources', `${workload.id}/${container.name}: no cpu/memory requests or memory limit`);
    }
  }
  checkExposure(objects, { workloads, replicas, consoles, replicaSecrets }, report);
  return { findings, n, f };
}
