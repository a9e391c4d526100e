/**
 * The deployment files under the tools that consume them, offline: kubectl renders both
 * kustomizations (deploy/kubernetes and its prometheus-operator folder) into the objects the manifest
 * test checks, every namespaced one in `quorumfence`; promtool accepts the alert rules and the
 * PrometheusRule's copy of them, and the rule tests in deploy/prometheus/alerts.test.yml pass (each
 * alert under the faults docs/operations.md describes); promtool accepts the scrape config. And the
 * scrape's TLS verification works as shipped: certificates made by the recipe in docs/operations.md
 * (step 2, run as written) let a client that checks them the way the scrape config says (its CA, its
 * server_name) read a real replica's /metrics over https, while another replica's name, or another CA,
 * is refused.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get as httpsGet } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { dealLocalCluster, startLocalCluster } from '../../src/cluster/launcher.js';
import { loadManifestFiles } from '../support/kubernetes-manifests.js';
import { lacks, needs } from '../support/system-tools.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const KUBERNETES = join(ROOT, 'deploy', 'kubernetes');
const PROMETHEUS = join(ROOT, 'deploy', 'prometheus');
const root = mkdtempSync(join(tmpdir(), 'qf-deploy-tools-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Runs a tool that must be installed (Debian: kubernetes-client for kubectl, prometheus for promtool). */
function run(tool: string, args: string[], cwd = ROOT): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(tool, args, { cwd, encoding: 'utf8', timeout: 60_000 });
  if (result.error)
    throw new Error(`${tool} is not installed (${result.error.message}); .ci/run installs it on Debian`);
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

interface Rendered {
  kind: string;
  metadata: { name: string; namespace?: string };
}

describe.skipIf(lacks('kubectl'))(`kubectl kustomize ${needs('kubectl')}`, () => {
  const files = loadManifestFiles(KUBERNETES).filter((file) => !file.path.endsWith('kustomization.yaml'));
  it.each([
    ['deploy/kubernetes', (path: string) => !path.startsWith('prometheus-operator/')],
    ['deploy/kubernetes/prometheus-operator', (path: string) => path.startsWith('prometheus-operator/')],
  ])('renders %s: every object of its files, namespaced in quorumfence', (folder, mine) => {
    const result = run('kubectl', ['kustomize', folder]);
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    const rendered = parseAllDocuments(result.stdout).map((document) => document.toJS() as Rendered);
    const expected = files.filter((file) => mine(file.path)).flatMap((file) => file.objects);
    const key = (o: { kind: string; metadata: { name: string } }) => `${o.kind}/${o.metadata.name}`;
    expect(rendered.map(key).sort()).toEqual(expected.map(key).sort());
    for (const object of rendered)
      if (object.kind !== 'Namespace') expect(object.metadata.namespace, key(object)).toBe('quorumfence');
  });
});

describe.skipIf(lacks('promtool'))(`promtool ${needs('promtool')}`, () => {
  it('accepts the alert rules, and the PrometheusRule copy of them', () => {
    const alerts = run('promtool', ['check', 'rules', join(PROMETHEUS, 'alerts.yml')]);
    expect(alerts.status, alerts.stdout + alerts.stderr).toBe(0);
    const rule = parse(readFileSync(join(KUBERNETES, 'prometheus-operator', 'prometheus-rule.yaml'), 'utf8')) as {
      spec: { groups: unknown[] };
    };
    const copy = join(root, 'prometheus-rule-groups.yml');
    writeFileSync(copy, stringify({ groups: rule.spec.groups }));
    const copied = run('promtool', ['check', 'rules', copy]);
    expect(copied.status, copied.stdout + copied.stderr).toBe(0);
    expect(copied.stdout).toMatch(/SUCCESS: 8 rules found/);
  });

  it('passes the rule tests: each alert fires, and stays quiet, as docs/operations.md says', () => {
    // promtool compares every annotation of a firing alert; the tests name the summaries, so the rules are
    // checked without their runbooks' prose.
    const dir = join(root, 'rule-tests');
    mkdirSync(dir);
    const alerts = parse(readFileSync(join(PROMETHEUS, 'alerts.yml'), 'utf8')) as {
      groups: { rules: { annotations: { summary: string } }[] }[];
    };
    for (const group of alerts.groups)
      for (const rule of group.rules) rule.annotations = { summary: rule.annotations.summary };
    writeFileSync(join(dir, 'alerts.yml'), stringify(alerts));
    copyFileSync(join(PROMETHEUS, 'alerts.test.yml'), join(dir, 'alerts.test.yml'));
    const tested = run('promtool', ['test', 'rules', 'alerts.test.yml'], dir);
    expect(tested.stdout + tested.stderr).toMatch(/SUCCESS/);
    expect(tested.status, tested.stdout + tested.stderr).toBe(0);

    // The tests can fail: the same tests against the rules without the cluster label in the margin alert.
    const flattened = readFileSync(join(dir, 'alerts.yml'), 'utf8').replace(
      /count by \(cluster\) \(count by \(cluster, replica\)/,
      'count by (cluster) (count by (replica)',
    );
    writeFileSync(join(dir, 'alerts.yml'), flattened);
    expect(run('promtool', ['test', 'rules', 'alerts.test.yml'], dir).status).not.toBe(0);
  });

  it('accepts the scrape config (Kubernetes discovery swapped for static targets)', () => {
    // Debian's promtool is built without Kubernetes service discovery; everything else (TLS, relabelling) is
    // checked as written.
    const text = readFileSync(join(PROMETHEUS, 'scrape-config.yml'), 'utf8');
    const swapped = text.replace(
      /kubernetes_sd_configs:\n\s+- role: pod\n\s+namespaces:\n\s+names: \[quorumfence\]/g,
      "static_configs:\n      - targets: ['127.0.0.1:7001']",
    );
    expect(swapped.match(/static_configs/g)).toHaveLength(3);
    const file = join(root, 'prometheus.yml');
    writeFileSync(file, swapped);
    const checked = run('promtool', ['check', 'config', file]);
    expect(checked.status, checked.stdout + checked.stderr).toBe(0);
  });
});

/** One HTTPS GET of `path`, verifying the server's certificate with `ca` against `servername`. */
function getVerified(
  port: number,
  path: string,
  ca: Buffer,
  servername: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsGet({ host: '127.0.0.1', port, path, ca, servername, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
  });
}

describe.skipIf(lacks('promtool'))(
  `the scrape verifies the replicas certificates (docs/operations.md, step 2) ${needs('promtool')}`,
  () => {
    it('a certificate from the recipe verifies under the scrape config; another name or CA does not', async () => {
      const operations = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8');
      // The block under step 2 (indented as a list item's), starting with its marker comment.
      const block = /^( *)```sh\n\1(# make-certificates[\s\S]*?)\n\1```/m.exec(operations);
      expect(block, 'docs/operations.md has the certificate recipe').not.toBeNull();
      const recipe = block![2]!.replace(new RegExp(`^${block![1]}`, 'gm'), '');
      const certs = join(root, 'certs');
      mkdirSync(certs);
      const made = spawnSync('sh', ['-e', '-c', recipe], { cwd: certs, encoding: 'utf8', timeout: 60_000 });
      expect(made.status, made.stderr).toBe(0);
      const other = join(root, 'other-ca');
      mkdirSync(other);
      expect(spawnSync('sh', ['-e', '-c', recipe], { cwd: other, encoding: 'utf8', timeout: 60_000 }).status).toBe(0);

      const scrape = parse(readFileSync(join(PROMETHEUS, 'scrape-config.yml'), 'utf8')) as {
        scrape_configs: { job_name: string; tls_config?: { server_name: string } }[];
      };
      const serverName = scrape.scrape_configs.find((job) => job.job_name === 'quorumfence-replicas')!.tls_config!
        .server_name;
      dealLocalCluster(join(root, 'keys'), 4);
      const local = await startLocalCluster({
        newStores: true,
        dir: join(root, 'keys'),
        indices: [1],
        dataRoot: join(root, 'data'),
        extraArgs: ['--tls-cert', join(certs, 'replica-1.crt'), '--tls-key', join(certs, 'replica-1.key.pem')],
      });
      try {
        const port = local.replica(1).port;
        const ca = readFileSync(join(certs, 'ca.crt'));
        const metrics = await getVerified(port, '/metrics', ca, serverName);
        expect(metrics.status).toBe(200);
        expect(metrics.body).toMatch(/^quorumfence_replica_cluster_threshold\{[^}]*\} 3$/m);
        // Its own Service name verifies too (what clients use); another replica's does not.
        expect((await getVerified(port, '/healthz', ca, 'quorumfence-replica-1.quorumfence.svc')).status).toBe(200);
        await expect(getVerified(port, '/metrics', ca, 'quorumfence-replica-2.quorumfence.svc')).rejects.toMatchObject({
          code: 'ERR_TLS_CERT_ALTNAME_INVALID',
        });
        await expect(
          getVerified(port, '/metrics', readFileSync(join(other, 'ca.crt')), serverName),
        ).rejects.toMatchObject({
          code: expect.stringMatching(/UNABLE_TO_VERIFY_LEAF_SIGNATURE|CERT_SIGNATURE_FAILURE/),
        });
      } finally {
        await local.close();
      }
    }, 120_000);
  },
);
