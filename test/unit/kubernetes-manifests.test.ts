/**
 * deploy/kubernetes, checked offline: every document parses, every object validates against the
 * Kubernetes schemas (kubernetes-models; the Prometheus Operator's kinds against its own), each
 * kustomization lists every file of its folder, the deployment's invariants hold
 * (test/support/kubernetes-manifests.ts, kubernetes-exposure.ts), and the PrometheusRule holds the
 * groups of deploy/prometheus/alerts.yml. Each invariant is also broken on purpose in a copy, to
 * show the checker would catch it. (kubectl kustomize and promtool run in
 * test/integration/deploy-tools.test.ts.)
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import * as apps from 'kubernetes-models/apps/v1';
import * as networking from 'kubernetes-models/networking.k8s.io/v1';
import * as policy from 'kubernetes-models/policy/v1';
import * as core from 'kubernetes-models/v1';
import * as monitoring from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { checkMonitoring } from '../support/kubernetes-exposure.js';
import { checkManifests, loadManifestFiles, type KubeObject, type Rule } from '../support/kubernetes-manifests.js';

const DIR = fileURLToPath(new URL('../../deploy/kubernetes', import.meta.url));
const PROMETHEUS = fileURLToPath(new URL('../../deploy/prometheus', import.meta.url));
const KUSTOMIZATION = 'kustomization.yaml';
/** The Prometheus Operator's objects: a kustomization of their own, applied after the base. */
const OPERATOR_DIR = 'prometheus-operator/';
const files = loadManifestFiles(DIR);
const manifests = files.filter((file) => !file.path.endsWith(KUSTOMIZATION));
const objects = manifests.filter((file) => !file.path.startsWith(OPERATOR_DIR)).flatMap((file) => file.objects);
const operatorObjects = manifests.filter((file) => file.path.startsWith(OPERATOR_DIR)).flatMap((file) => file.objects);
const scrapeConfig = parse(readFileSync(join(PROMETHEUS, 'scrape-config.yml'), 'utf8')) as Parameters<
  typeof checkMonitoring
>[2];

type Model = new (data: KubeObject) => { validate(): void };

/** The schemas by apiVersion; an object of any other group or version fails the test. */
const MODELS: Record<string, Record<string, unknown>> = {
  v1: core,
  'apps/v1': apps,
  'policy/v1': policy,
  'networking.k8s.io/v1': networking,
  'monitoring.coreos.com/v1': monitoring,
};

function modelFor(object: KubeObject): Model {
  const model = MODELS[object.apiVersion]?.[object.kind];
  if (typeof model !== 'function') throw new Error(`no schema for ${object.apiVersion} ${object.kind}`);
  return model as Model;
}

function rulesOf(mutated: KubeObject[]): Rule[] {
  return checkManifests(mutated).findings.map((finding) => finding.rule);
}

function copy(): KubeObject[] {
  return structuredClone(objects);
}

function find(list: KubeObject[], kind: string, name: string): KubeObject {
  const found = list.find((o) => o.kind === kind && o.metadata.name === name);
  if (!found) throw new Error(`${kind}/${name} not in the manifests`);
  return found;
}

/** The pod spec inside a workload (typed loosely: the mutations below reach into it). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function podOf(workload: KubeObject): any {
  return (workload.spec as { template: { spec: unknown } }).template.spec;
}

describe('deploy/kubernetes', () => {
  it('parses into objects that validate against the Kubernetes and Prometheus Operator schemas', () => {
    expect(objects.length).toBeGreaterThan(10);
    expect(operatorObjects.map((o) => o.kind).sort()).toEqual([
      'PrometheusRule',
      'ServiceMonitor',
      'ServiceMonitor',
      'ServiceMonitor',
    ]);
    for (const object of [...objects, ...operatorObjects]) {
      const Model = modelFor(object);
      expect(() => new Model(object).validate(), `${object.kind}/${object.metadata.name}`).not.toThrow();
    }
  });

  it('a schema violation is caught by the validation', () => {
    const broken = copy();
    const replica = find(broken, 'StatefulSet', 'quorumfence-replica-1');
    podOf(replica).containers[0].ports[0].containerPort = 'seven thousand';
    const Model = modelFor(replica);
    expect(() => new Model(replica).validate()).toThrow(/containerPort/);
  });

  it('each kustomization lists every manifest file of its folder and sets the namespace the endpoints name', () => {
    for (const folder of ['', OPERATOR_DIR]) {
      const kustomization = parse(readFileSync(join(DIR, folder, KUSTOMIZATION), 'utf8')) as {
        namespace: string;
        resources: string[];
      };
      const mine = manifests
        .map((file) => file.path)
        .filter((path) => path.startsWith(folder) && (folder !== '' || !path.startsWith(OPERATOR_DIR)))
        .map((path) => path.slice(folder.length));
      expect([...kustomization.resources].sort(), folder || 'base').toEqual(mine.sort());
      expect(kustomization.namespace).toBe('quorumfence');
    }
    const replica = find(objects, 'StatefulSet', 'quorumfence-replica-2');
    const init = podOf(replica).initContainers[0] as { args: string[] };
    expect(init.args).toContain('wss://quorumfence-replica-2.quorumfence.svc:7001');
  });

  it('holds every invariant, with N = 4 and f = 1 derived from the manifests', () => {
    const result = checkManifests(objects);
    expect(result.findings).toEqual([]);
    expect(result.n).toBe(4);
    expect(result.f).toBe(1);
  });

  it('replica i gets its own Secret, claim, Services and endpoint, all named for i', () => {
    for (const i of [1, 2, 3, 4]) {
      const replica = find(objects, 'StatefulSet', `quorumfence-replica-${i}`);
      const pod = podOf(replica);
      expect(pod.volumes.find((v: { secret?: unknown }) => v.secret).secret.secretName).toBe(
        `quorumfence-replica-${i}-tls`,
      );
      expect(pod.initContainers[0].args).toContain(`ws://quorumfence-replica-${i}-ceremony.quorumfence.svc:7002`);
      expect((find(objects, 'Service', `quorumfence-replica-${i}`).spec as { selector: object }).selector).toEqual(
        replica.metadata.labels,
      );
      const ceremony = find(objects, 'Service', `quorumfence-replica-${i}-ceremony`).spec as {
        publishNotReadyAddresses: boolean;
      };
      // The ceremony runs while the pods are still initialising, so not ready.
      expect(ceremony.publishNotReadyAddresses).toBe(true);
    }
  });

  it('the four replica files differ only in the replica index', () => {
    // Written from one template: a fix made in one file and not the others is a bug.
    const normalized = [1, 2, 3, 4].map((i) =>
      readFileSync(join(DIR, `replicas/replica-${i}.yaml`), 'utf8').replace(
        new RegExp(`(replica-|[Rr]eplica |replica: ")${i}(?=[-."'\\s]|$)`, 'gm'),
        '$1<i>',
      ),
    );
    expect(normalized[0]).toContain('quorumfence-replica-<i>-tls');
    for (const other of normalized.slice(1)) expect(other).toBe(normalized[0]);
  });

  it('the console: one pod, a client of the replicas, behind a ClusterIP Service, reached by the scraper only', () => {
    const console = find(objects, 'Deployment', 'quorumfence-console');
    const pod = podOf(console);
    expect(pod.containers[0].args).toEqual(expect.arrayContaining(['console', '--allow-remote']));
    expect((find(objects, 'Service', 'quorumfence-console').spec as { type: string }).type).toBe('ClusterIP');
    const policy = find(objects, 'NetworkPolicy', 'quorumfence-console').spec as {
      ingress: { from: unknown[]; ports: { port: number }[] }[];
    };
    expect(policy.ingress.flatMap((rule) => rule.ports.map((p) => p.port))).toEqual([7460]);
  });

  it('the Prometheus Operator objects scrape the three jobs as the scrape config does, certificates verified', () => {
    expect(checkMonitoring(operatorObjects, objects, scrapeConfig)).toEqual([]);
  });

  it('the PrometheusRule holds exactly the groups of deploy/prometheus/alerts.yml', () => {
    const alerts = parse(readFileSync(join(PROMETHEUS, 'alerts.yml'), 'utf8')) as { groups: unknown[] };
    const rule = find(operatorObjects, 'PrometheusRule', 'quorumfence').spec as { groups: unknown[] };
    expect(rule.groups).toEqual(alerts.groups);
    expect(alerts.groups.length).toBeGreaterThanOrEqual(3);
  });

  describe('reports a broken invariant', () => {
    it('a replica Secret mounted by a second workload (the resource)', () => {
      const broken = copy();
      podOf(find(broken, 'Deployment', 'quorumfence-resource')).volumes.push({
        name: 'stolen',
        secret: { secretName: 'quorumfence-replica-1-tls' },
      });
      const rules = rulesOf(broken);
      expect(rules).toContain('secret-shared');
      expect(rules).toContain('resource-isolation');
    });

    it('two replicas sharing one Secret', () => {
      const broken = copy();
      const pod = podOf(find(broken, 'StatefulSet', 'quorumfence-replica-2'));
      pod.volumes.find((v: { name: string }) => v.name === 'tls').secret.secretName = 'quorumfence-replica-1-tls';
      const rules = rulesOf(broken);
      expect(rules).toContain('secret-shared');
      expect(rules).toContain('secret-per-replica');
    });

    it('a replica StatefulSet scaled to two pods', () => {
      const broken = copy();
      (find(broken, 'StatefulSet', 'quorumfence-replica-3').spec as { replicas: number }).replicas = 2;
      const rules = rulesOf(broken);
      expect(rules).toContain('replica-scale');
      expect(rules).toContain('secret-shared');
    });

    it('a disruption budget that allows f + 1 replicas down', () => {
      const broken = copy();
      (find(broken, 'PodDisruptionBudget', 'quorumfence-replicas').spec as { maxUnavailable: number }).maxUnavailable =
        2;
      expect(rulesOf(broken)).toEqual(['disruption-budget']);
    });

    it('a fifth replica (N = 5 is not 3f+1)', () => {
      const broken = copy();
      const fifth = structuredClone(find(broken, 'StatefulSet', 'quorumfence-replica-4'));
      fifth.metadata.name = 'quorumfence-replica-5';
      broken.push(fifth);
      const result = checkManifests(broken);
      expect(result.n).toBe(5);
      expect(result.f).toBeUndefined();
      expect(result.findings.map((finding) => finding.rule)).toContain('replica-count');
    });

    it('anti-affinity dropped or only preferred', () => {
      const broken = copy();
      delete podOf(find(broken, 'StatefulSet', 'quorumfence-replica-1')).affinity;
      expect(rulesOf(broken)).toEqual(['anti-affinity']);
    });

    it('a probe on another path', () => {
      const broken = copy();
      podOf(find(broken, 'StatefulSet', 'quorumfence-replica-4')).containers[0].livenessProbe.httpGet.path = '/';
      expect(rulesOf(broken)).toEqual(['probe']);
    });

    it('a scrape annotation naming a port no container exposes', () => {
      const broken = copy();
      const template = (
        find(broken, 'Deployment', 'quorumfence-resource').spec as {
          template: { metadata: { annotations: Record<string, string> } };
        }
      ).template;
      template.metadata.annotations['prometheus.io/port'] = '9090';
      expect(rulesOf(broken)).toEqual(['scrape']);
    });

    it('a replica without its own claim, and the resource on a replica volume', () => {
      const broken = copy();
      (
        find(broken, 'StatefulSet', 'quorumfence-replica-2').spec as { volumeClaimTemplates: unknown[] }
      ).volumeClaimTemplates = [];
      podOf(find(broken, 'Deployment', 'quorumfence-resource')).volumes.find(
        (v: { name: string }) => v.name === 'data',
      ).persistentVolumeClaim.claimName = 'data-quorumfence-replica-1-0';
      const rules = rulesOf(broken);
      expect(rules).toContain('pvc-per-replica');
      expect(rules).toContain('resource-isolation');
    });

    it('a container running with a writable root filesystem', () => {
      const broken = copy();
      podOf(
        find(broken, 'StatefulSet', 'quorumfence-replica-1'),
      ).initContainers[1].securityContext.readOnlyRootFilesystem = false;
      expect(rulesOf(broken)).toEqual(['security-context']);
    });

    it('a Service of type NodePort or LoadBalancer, or with an external IP', () => {
      for (const mutate of [
        (spec: Record<string, unknown>) => (spec.type = 'NodePort'),
        (spec: Record<string, unknown>) => (spec.type = 'LoadBalancer'),
        (spec: Record<string, unknown>) => (spec.externalIPs = ['203.0.113.7']),
      ]) {
        const broken = copy();
        mutate(find(broken, 'Service', 'quorumfence-console').spec!);
        expect(rulesOf(broken)).toEqual(['service-exposure']);
      }
    });

    it('a replica policy rule that admits every peer, a client reaching the ceremony port, or no policy', () => {
      const allowAll = copy();
      (find(allowAll, 'NetworkPolicy', 'quorumfence-replicas').spec as { ingress: unknown[] }).ingress.push({});
      expect(new Set(rulesOf(allowAll))).toEqual(new Set(['network-policy']));
      const ceremony = copy();
      (
        find(ceremony, 'NetworkPolicy', 'quorumfence-replicas').spec as { ingress: { ports: { port: number }[] }[] }
      ).ingress[0]!.ports.push({ port: 7002 });
      expect(new Set(rulesOf(ceremony))).toEqual(new Set(['network-policy']));
      const anyPod = copy();
      (
        find(anyPod, 'NetworkPolicy', 'quorumfence-replicas').spec as { ingress: { from: unknown[] }[] }
      ).ingress[0]!.from.push({ namespaceSelector: {}, podSelector: {} });
      expect(new Set(rulesOf(anyPod))).toEqual(new Set(['network-policy']));
      const none = copy().filter((o) => !(o.kind === 'NetworkPolicy' && o.metadata.name === 'quorumfence-replicas'));
      expect(new Set(rulesOf(none))).toEqual(new Set(['network-policy']));
    });

    it('a console the replicas would not admit, or that clients could reach', () => {
      const unlabelled = copy();
      const template = (
        find(unlabelled, 'Deployment', 'quorumfence-console').spec as {
          template: { metadata: { labels: Record<string, string> } };
        }
      ).template;
      delete template.metadata.labels['quorumfence/client'];
      expect(rulesOf(unlabelled)).toEqual(['network-policy']);
      const open = copy();
      (
        find(open, 'NetworkPolicy', 'quorumfence-console').spec as { ingress: { from: unknown[] }[] }
      ).ingress[0]!.from.push({
        namespaceSelector: {},
        podSelector: { matchLabels: { 'quorumfence/client': 'true' } },
      });
      expect(rulesOf(open)).toEqual(['network-policy']);
    });

    it('a console that mounts a replica Secret or keeps a volume', () => {
      const broken = copy();
      podOf(find(broken, 'Deployment', 'quorumfence-console')).volumes.push(
        { name: 'stolen', secret: { secretName: 'quorumfence-replica-2-tls' } },
        { name: 'disk', persistentVolumeClaim: { claimName: 'console-data' } },
      );
      const rules = rulesOf(broken);
      expect(rules).toContain('console-isolation');
      expect(rules).toContain('secret-shared');
    });

    it('a scrape that skips certificate checks, a monitor naming another job, or a port the Service lacks', () => {
      const skip = structuredClone(operatorObjects);
      const replicas = find(skip, 'ServiceMonitor', 'quorumfence-replicas').spec as {
        endpoints: { tlsConfig: Record<string, unknown> }[];
      };
      replicas.endpoints[0]!.tlsConfig.insecureSkipVerify = true;
      expect(checkMonitoring(skip, objects, scrapeConfig).map((f) => f.message)).toEqual([
        'ServiceMonitor/quorumfence-replicas skips a certificate check',
      ]);
      const plain = structuredClone(scrapeConfig);
      (plain.scrape_configs[0]!.tls_config as Record<string, unknown>) = { insecure_skip_verify: true };
      expect(checkMonitoring(operatorObjects, objects, plain).map((f) => f.message)).toEqual(
        expect.arrayContaining([
          'the scrape config skips a certificate check',
          'the scrape config verifies the replicas without a CA file or server name',
        ]),
      );
      const job = structuredClone(operatorObjects);
      (find(job, 'ServiceMonitor', 'quorumfence-console').spec as { jobLabel: string }).jobLabel =
        'app.kubernetes.io/name';
      expect(checkMonitoring(job, objects, scrapeConfig)).toHaveLength(1);
      const port = structuredClone(operatorObjects);
      (
        find(port, 'ServiceMonitor', 'quorumfence-resource').spec as { endpoints: { port: string }[] }
      ).endpoints[0]!.port = 'metrics';
      expect(checkMonitoring(port, objects, scrapeConfig)).toHaveLength(1);
    });
  });
});
