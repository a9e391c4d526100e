/**
 * deploy/kubernetes, checked offline: every document parses, every object validates against the
 * Kubernetes schemas (kubernetes-models), the kustomization lists every file, and the deployment's
 * invariants hold (test/support/kubernetes-manifests.ts). Each invariant is also broken on purpose
 * in a copy, to show the checker would catch it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import * as apps from 'kubernetes-models/apps/v1';
import * as policy from 'kubernetes-models/policy/v1';
import * as core from 'kubernetes-models/v1';
import { checkManifests, loadManifestFiles, type KubeObject, type Rule } from '../support/kubernetes-manifests.js';

const DIR = fileURLToPath(new URL('../../deploy/kubernetes', import.meta.url));
const KUSTOMIZATION = 'kustomization.yaml';
const files = loadManifestFiles(DIR);
const objects = files.filter((file) => file.path !== KUSTOMIZATION).flatMap((file) => file.objects);

type Model = new (data: KubeObject) => { validate(): void };

/** kubernetes-models' classes by apiVersion; an object of any other group or version fails the test. */
const MODELS: Record<string, Record<string, unknown>> = { v1: core, 'apps/v1': apps, 'policy/v1': policy };

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
  it('parses into objects that validate against the Kubernetes schemas', () => {
    expect(objects.length).toBeGreaterThan(10);
    for (const object of objects) {
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

  it('the kustomization lists every manifest file and sets the namespace the endpoints name', () => {
    const kustomization = parse(readFileSync(join(DIR, KUSTOMIZATION), 'utf8')) as {
      namespace: string;
      resources: string[];
    };
    expect([...kustomization.resources].sort()).toEqual(
      files
        .map((file) => file.path)
        .filter((path) => path !== KUSTOMIZATION)
        .sort(),
    );
    expect(kustomization.namespace).toBe('quorumfence');
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
  });
});
