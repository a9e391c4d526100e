/**
 * The Kubernetes objects of deploy/kubernetes as the checks read them: the manifest files parsed into
 * objects, the fields the checks use typed, and the workloads (their pods, labels and mounts) found
 * among them. Shared by kubernetes-manifests.ts and kubernetes-exposure.ts.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseAllDocuments } from 'yaml';

/** A Kubernetes object as parsed: only the fields the checks read are typed. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
  [field: string]: unknown;
}

export interface ManifestFile {
  /** Path relative to the manifests folder, with forward slashes. */
  readonly path: string;
  readonly objects: KubeObject[];
}

/** Every *.yaml file under `dir` (recursively), each parsed into its documents; empty documents dropped. */
export function loadManifestFiles(dir: string): ManifestFile[] {
  const files: ManifestFile[] = [];
  const walk = (folder: string): void => {
    for (const entry of readdirSync(folder, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const full = join(folder, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (/\.ya?ml$/.test(entry.name)) {
        const documents = parseAllDocuments(readFileSync(full, 'utf8'));
        const objects: KubeObject[] = [];
        for (const document of documents) {
          if (document.errors.length > 0)
            throw new Error(`${full}: ${document.errors.map((e) => e.message).join('; ')}`);
          const value = document.toJS() as KubeObject | null;
          if (value !== null) objects.push(value);
        }
        files.push({ path: relative(dir, full).split('\\').join('/'), objects });
      }
    }
  };
  walk(dir);
  return files;
}

export interface Probe {
  httpGet?: { path?: string; port?: number | string; scheme?: string };
}
export interface Container {
  name: string;
  args?: string[];
  ports?: { name?: string; containerPort: number }[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  volumeMounts?: { name: string; mountPath: string }[];
  securityContext?: { allowPrivilegeEscalation?: boolean; readOnlyRootFilesystem?: boolean; runAsNonRoot?: boolean };
  resources?: { requests?: Record<string, unknown>; limits?: Record<string, unknown> };
  env?: { valueFrom?: { secretKeyRef?: { name?: string } } }[];
  envFrom?: { secretRef?: { name?: string } }[];
}
export interface Volume {
  name: string;
  secret?: { secretName?: string };
  persistentVolumeClaim?: { claimName?: string };
  configMap?: { name?: string };
  projected?: { sources?: { secret?: { name?: string } }[] };
}
export interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  volumes?: Volume[];
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number };
  affinity?: {
    podAntiAffinity?: {
      requiredDuringSchedulingIgnoredDuringExecution?: {
        topologyKey?: string;
        labelSelector?: { matchLabels?: Record<string, string> };
      }[];
    };
  };
}
export interface Workload {
  readonly object: KubeObject;
  readonly id: string;
  readonly component: string | undefined;
  /** Pods this workload runs at once (replicas, or 1 for a Pod or Job). */
  readonly pods: number;
  readonly podLabels: Record<string, string>;
  readonly podAnnotations: Record<string, string>;
  readonly pod: PodSpec;
  readonly claimTemplates: string[];
}

export const WORKLOAD_KINDS = new Set(['StatefulSet', 'Deployment', 'DaemonSet', 'ReplicaSet', 'Job', 'Pod']);

export function workloadsOf(objects: readonly KubeObject[]): Workload[] {
  return objects
    .filter((o) => WORKLOAD_KINDS.has(o.kind))
    .map((object) => {
      const spec = (object.spec ?? {}) as {
        replicas?: number;
        template?: {
          metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
          spec: PodSpec;
        };
        volumeClaimTemplates?: { metadata: { name: string } }[];
      };
      const isPod = object.kind === 'Pod';
      const template = isPod
        ? { metadata: object.metadata, spec: object.spec as unknown as PodSpec }
        : (spec.template ?? { spec: { containers: [] } });
      // A DaemonSet runs a pod on every node: always more than one.
      const pods = object.kind === 'DaemonSet' ? Infinity : isPod || object.kind === 'Job' ? 1 : (spec.replicas ?? 1);
      return {
        object,
        id: `${object.kind}/${object.metadata.name}`,
        component: template.metadata?.labels?.['app.kubernetes.io/component'],
        pods,
        podLabels: template.metadata?.labels ?? {},
        podAnnotations: template.metadata?.annotations ?? {},
        pod: template.spec,
        claimTemplates: (spec.volumeClaimTemplates ?? []).map((c) => c.metadata.name),
      };
    });
}

export function allContainers(pod: PodSpec): Container[] {
  return [...(pod.initContainers ?? []), ...pod.containers];
}

/** Every Secret a pod can read: secret and projected volumes, env and envFrom references. */
export function secretsOf(pod: PodSpec): Set<string> {
  const names = new Set<string>();
  for (const volume of pod.volumes ?? []) {
    if (volume.secret?.secretName) names.add(volume.secret.secretName);
    for (const source of volume.projected?.sources ?? []) if (source.secret?.name) names.add(source.secret.name);
  }
  for (const container of allContainers(pod)) {
    for (const env of container.env ?? []) {
      const name = env.valueFrom?.secretKeyRef?.name;
      if (name) names.add(name);
    }
    for (const from of container.envFrom ?? []) if (from.secretRef?.name) names.add(from.secretRef.name);
  }
  return names;
}

export function selects(selector: Record<string, string> | undefined, labels: Record<string, string>): boolean {
  if (!selector || Object.keys(selector).length === 0) return false;
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

export function portNames(pod: PodSpec): Map<string | number, number> {
  const ports = new Map<string | number, number>();
  for (const container of pod.containers) {
    for (const port of container.ports ?? []) {
      ports.set(port.containerPort, port.containerPort);
      if (port.name) ports.set(port.name, port.containerPort);
    }
  }
  return ports;
}
