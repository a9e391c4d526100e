/**
 * The operator console under the faults the cluster is built to tolerate (issues 29 and 46), as an operator sees it in
 * a real headless Chromium: replica processes, the real `quorumfence console` process (with --data), real sockets.
 * Every scenario checks the status line at the top (its word, its text class, its first action and runbook) besides
 * the replica rows, and saves test-artefacts/console-<scenario>.png (some also a 390 px wide one, -390.png).
 *
 * N = 4, all honest, replica 2's link from the console through the fault proxy:
 * - all healthy: healthy (ok), margin 1, nobody faulty, holder names from --holders; the page fits 390 px;
 * - another identity's 40 leases push a watched lease off every replica's list: the page says the lists were cut and
 *   how to see the rest, and the --watch row shows the lease (issue 43 item 6);
 * - replica 2 partitioned (a black hole): hung, degraded (warn), not faulty, margin 0;
 * - a replica SIGSTOPped: hung (connection open, no answer), told apart from a dead one;
 * - a replica SIGKILLed while it co-signed running leases: down (refused), degraded, margin 0 within 8 s, no survivor
 *   faulty, and so for as long as it is down (checked over many polls: the old rule convicted the signers after 3);
 * - two of four SIGKILLed: within 5 s unavailable (bad), "acquires are failing", bring back which, the alerts tile
 *   not green, the lease two replicas still list at risk; fits 390 px;
 * - the console restarted on its --data: the charts keep the minutes before, with the gap shaded;
 * - the console process stopped (SIGSTOP): every tile and the status line greyed as stale, none green.
 * N = 7: one replica down is degraded (amber), not healthy; two co-signers of running leases killed: margin 0.
 * N = 4 with replica 4 sending malformed answers to half its requests: faulty on the first one, with evidence to
 * download, counted in quorumfence_console_evidence_total and QuorumFenceReplicaFaulty firing, and it stays so.
 *
 * The lying replica (lie-epoch-huge) is console-browser.test.ts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QuorumFenceClient, generateIdentity, createIdentityFile } from '../../src/client/index.js';
import type { Lease } from '../../src/client/lease.js';
import { clusterToJson, loadClusterFile, withEndpoints, type Cluster } from '../../src/cluster/description.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { byzantineEntryPoint } from '../../src/testing/byzantine/control.js';
import { toHex } from '../../src/common/bytes.js';
import { HOLDER_NAMES_FORMAT } from '../../src/console/holders.js';
import type { ConsoleState } from '../../src/console/watcher.js';
import { startFaultProxy, type FaultProxy } from '../../src/testing/fault-proxy.js';
import { untilAllReady } from '../support/connected.js';
import {
  PAGE_WAIT,
  narrowScreenshot,
  openConsoleBrowser,
  screenshot,
  shownReplica,
  shownReplicas,
  shownStatusLine,
  startConsoleProcess,
  type ConsoleBrowser,
  type ConsoleProcess,
} from '../support/console-page.js';
import { lacks, needs } from '../support/system-tools.js';

/** The bound: the console shows a killed replica as down, and the margin right, within 8 s. */
const SETTLE_WITHIN = { timeout: 8_000, interval: 200 };
/** Issue 46's bound: with 2 of 4 killed, the status line says acquires are failing within 5 s. */
const UNAVAILABLE_WITHIN = { timeout: 5_000, interval: 100 };
/**
 * Leases another identity holds in the cut-list scenario: the 40, and more, so that under a protocol where
 * only the t signers of a lease hold it, every replica still holds more than the 32 a list carries.
 */
const FLOOD_LEASES = 60;
/** The resource the console watches (--watch): shown even when the lease lists are cut. */
const WATCHED = 'watched/orders';
/** How long a fault is watched after it settled: 12 polls of 500 ms, four times the old rule's 3 polls. */
const WATCH_MS = 6_000;
const FAST = ['--signing-workers', '0', '--min-ttl', '50ms', '--max-ttl', '60s'];

interface Setup {
  root: string;
  replicas: LocalCluster;
  cluster: Cluster;
  clusterFile: string;
  identityFile: string;
  consoleArgs: string[];
  console: ConsoleProcess;
  browser: ConsoleBrowser;
  page: Page;
  client: QuorumFenceClient;
  proxy?: FaultProxy;
}

/** Deals n replicas, starts them, the console (replica `proxied`'s link through a fault proxy) and chromium. */
async function setUp(n: number, proxied?: number): Promise<Setup> {
  const root = mkdtempSync(join(tmpdir(), `qf-console-faults-${n}-`));
  const keys = join(root, 'keys');
  dealLocalCluster(keys, n);
  const replicas = await startLocalCluster({
    newStores: true,
    dir: keys,
    dataRoot: join(root, 'data'),
    extraArgs: FAST,
  });
  const proxy = proxied ? await startFaultProxy({ target: replicas.replica(proxied).url }) : undefined;
  const endpoints = replicas.cluster.replicas.map((r) => (r.index === proxied ? proxy!.url : r.endpoint));
  const consoleCluster = withEndpoints(replicas.cluster, endpoints);
  const clusterFile = join(root, 'cluster.json');
  writeFileSync(clusterFile, JSON.stringify(clusterToJson(consoleCluster)));
  const identityFile = join(root, 'console.identity');
  createIdentityFile(identityFile);
  const holder = generateIdentity();
  const holdersFile = join(root, 'holders.json');
  writeFileSync(
    holdersFile,
    JSON.stringify({ format: HOLDER_NAMES_FORMAT, holders: { [toHex(holder.publicKey)]: 'billing-worker-1' } }),
  );
  const consoleArgs = ['--holders', holdersFile, '--data', join(root, 'console-data'), '--watch', WATCHED];
  const consoleProcess = await startConsoleProcess(clusterFile, identityFile, consoleArgs);
  const browser = await openConsoleBrowser();
  await browser.page.goto(consoleProcess.url + '/');
  // The holder talks to the replicas directly: only the console's link to replica `proxied` goes through the proxy.
  const client = await QuorumFenceClient.connect(replicas.cluster, holder, { requestTimeoutMs: 3_000 });
  await untilAllReady(client);
  return {
    root,
    replicas,
    cluster: replicas.cluster,
    clusterFile,
    identityFile,
    consoleArgs,
    console: consoleProcess,
    browser,
    page: browser.page,
    client,
    proxy,
  };
}

async function tearDown(setup: Setup | undefined): Promise<void> {
  if (!setup) return;
  await setup.client.close().catch(() => undefined);
  await setup.browser.close();
  await setup.console.stop();
  await setup.proxy?.close();
  await setup.replicas.close();
  rmSync(setup.root, { recursive: true, force: true });
}

async function state(setup: Setup): Promise<ConsoleState> {
  return (await (await fetch(`${setup.console.url}/api/state`)).json()) as ConsoleState;
}

/**
 * Acquires `count` resources named `prefix`k and waits until the console shows each, listed by its signers (t,
 * or more when an acquire widened on a slow box); returns them, those listed by exactly t first.
 */
async function holdLeases(setup: Setup, prefix: string, count: number): Promise<ConsoleState['leases']> {
  const leases: Lease[] = [];
  for (let k = 0; k < count; k++) {
    const acquired = await setup.client.acquire(`${prefix}${k}`, { ttlMs: 60_000, autoRenew: false });
    if (!acquired.ok) throw new Error(`acquire failed: ${acquired.reason}`);
    leases.push(acquired.lease);
  }
  const ours = async () =>
    (await state(setup)).leases.filter((l) => l.resource.startsWith(prefix) && l.reportedBy.length >= setup.cluster.t);
  await expect.poll(async () => (await ours()).length, PAGE_WAIT).toBe(count);
  // Every replica lists each lease: those that did not sign it join it (docs/protocol.md, "Leases that outlive f
  // signers"), so f replicas down leave each listed by 2f+1 = t. A join is asked at the lease's join time (a tenth of
  // its 60 s ttl, at most 1 s) and again with every renewal; on a loaded machine one can time out (a CI run saw a
  // lease listed by t replicas for 20 s), and these 60 s leases renew only when asked: one renewal each, as their
  // holder's timer would make, carries the evidence to every replica.
  for (const lease of leases) expect((await lease.renew()).ok).toBe(true);
  await expect
    .poll(async () => (await ours()).every((l) => l.reportedBy.length === setup.cluster.n), PAGE_WAIT)
    .toBe(true);
  return (await ours()).sort((a, b) => a.resource.localeCompare(b.resource));
}

/**
 * Checks, poll after poll for WATCH_MS, that the page shows `down` unreachable as `how` (hung or down) with a "since",
 * nobody faulty, the status line `status` with its text class, and `margin`.
 */
async function holdsFor(
  page: Page,
  down: readonly number[],
  margin: number,
  how: 'hung' | 'down',
  status: 'degraded' | 'unavailable',
): Promise<void> {
  const until = performance.now() + WATCH_MS;
  let checks = 0;
  while (performance.now() < until || checks < 3) {
    const rows = await shownReplicas(page);
    expect(rows.filter((r) => r.faulty !== 'false').map((r) => r.replica)).toEqual([]);
    expect(
      rows
        .filter((r) => r.reachable === 'false')
        .map((r) => Number(r.replica))
        .sort(),
    ).toEqual([...down].sort());
    for (const row of rows.filter((r) => r.reachable === 'false')) {
      expect(row.unreachable).toBe(how);
      expect(row.downSince).toMatch(new RegExp(`^${how} since \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC$`));
    }
    // Worst first: the unreachable rows above the others.
    expect(rows.slice(0, down.length).map((r) => r.reachable)).toEqual(down.map(() => 'false'));
    const line = await shownStatusLine(page);
    expect([line.status, line.textClass]).toEqual([status, status === 'degraded' ? 'warn' : 'bad']);
    expect(await page.textContent('#margin')).toBe(String(margin));
    checks++;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** Starts the console again (same cluster, identity and --data) and points the page at it. */
async function restartConsole(setup: Setup): Promise<void> {
  await setup.console.stop();
  setup.console = await startConsoleProcess(setup.clusterFile, setup.identityFile, setup.consoleArgs);
  await setup.page.goto(setup.console.url + '/');
}

describe.skipIf(lacks('chromium'))(`the console in Chromium under faults, N = 4 ${needs('chromium')}`, () => {
  let setup: Setup;
  beforeAll(async () => {
    setup = await setUp(4, 2);
  }, 120_000);
  afterAll(() => tearDown(setup), 60_000);

  it('all healthy: margin 1, nobody faulty or unreachable, holder names from --holders, times in UTC', async () => {
    const { page } = setup;
    await expect.poll(() => page.textContent('#margin'), PAGE_WAIT).toBe('1');
    await holdLeases(setup, 'healthy/', 2);
    await page.waitForSelector('#leases tr[data-resource="healthy/0"]', PAGE_WAIT);
    expect(await page.textContent('#leases tr[data-resource="healthy/0"] td:nth-child(3)')).toContain(
      'billing-worker-1',
    );
    const rows = await shownReplicas(page);
    expect(rows.map((r) => [r.replica, r.reachable, r.faulty])).toEqual(
      [1, 2, 3, 4].map((i) => [String(i), 'true', 'false']),
    );
    // Scripts written against GET /api/state keep working: margin, and replicas[] with replica, reachable, faulty.
    const json = await state(setup);
    expect(json.margin).toBe(1);
    expect(json.replicas.map(({ replica, reachable, faulty }) => ({ replica, reachable, faulty }))).toEqual(
      [1, 2, 3, 4].map((replica) => ({ replica, reachable: true, faulty: null })),
    );
    // Each replica's store and floor (its /metrics, through the proxy for replica 2), and the UTC label.
    expect(rows[1]!.text).toMatch(/records/);
    expect(await page.textContent('.sub')).toContain('all times UTC');
    // The status line: healthy, in green, nothing to do; the alerts tile green with nothing pending.
    const line = await shownStatusLine(page);
    expect(line).toMatchObject({ status: 'healthy', textClass: 'ok', actions: [] });
    expect(line.headline).toBe('Healthy: all 4 replicas answer, acquires work and 1 more replica may fail.');
    expect(json.status).toBe('healthy');
    // The alerts tile counts firing and pending apart, and is green only with neither (on a loaded machine the fsync
    // p99 rule may be pending: then it says so, in amber, with the time it fires).
    const tile = async () => ({
      firing: await page.textContent('#alertCount'),
      pending: await page.textContent('#alertPending'),
      cls: await page.getAttribute('#alertCount', 'class'),
    });
    await expect.poll(async () => (await tile()).firing, PAGE_WAIT).toBe('0 firing');
    const { alertSummary } = await state(setup);
    const shownTile = await tile();
    if (alertSummary.pending === 0) expect(shownTile).toMatchObject({ pending: 'none pending', cls: 'big ok' });
    else
      expect(shownTile).toMatchObject({
        pending: expect.stringMatching(/ pending, the first fires at /),
        cls: 'big warn',
      });
    // Axes with labelled ticks, and a tooltip per bucket (an SVG title: no script).
    await page.waitForSelector('#chart-margin circle', PAGE_WAIT);
    expect((await page.$$('#chart-margin text.tick')).length).toBeGreaterThanOrEqual(5);
    expect(await page.$eval('#chart-margin rect.hit title', (t) => t.textContent)).toMatch(
      /^\d\d:\d\d:\d\d UTC — margin 1$/,
    );
    // The fsync p99 beside the mean, once the replicas' flush histograms have two samples.
    await expect.poll(async () => (await shownReplica(page, 1))?.text, PAGE_WAIT).toMatch(/fsync p99 \(5 min\) \d/);
    expect((await shownReplica(page, 1))!.text).toMatch(/fsync mean \d/);
    await screenshot(page, 'healthy');
    expect(await narrowScreenshot(page, 'healthy')).toBeLessThanOrEqual(390);
  }, 60_000);

  it('another identity’s leases push a watched lease off every list: the page says the lists are cut, and the --watch row shows it (issue 43 item 6)', async () => {
    const { page } = setup;
    const honest = await setup.client.acquire(WATCHED, { ttlMs: 20_000, autoRenew: false });
    if (!honest.ok) throw new Error(`acquire failed: ${honest.reason}`);
    const flooder = await QuorumFenceClient.connect(setup.cluster, generateIdentity(), { requestTimeoutMs: 3_000 });
    try {
      // Each ends after the honest lease: every replica lists the 32 ending last, so the honest one is left out.
      for (let k = 0; k < FLOOD_LEASES; k++) {
        const acquired = await flooder.acquire(`flood/${k}`, { ttlMs: 50_000, autoRenew: false });
        if (!acquired.ok) throw new Error(`acquire failed: ${acquired.reason}`);
      }
      await expect.poll(async () => (await state(setup)).leaseLists.cut, PAGE_WAIT).toEqual([1, 2, 3, 4]);
      const json = await state(setup);
      expect(json.leases.map((l) => l.resource)).not.toContain(WATCHED);
      // Not silently: the notice names the replicas and how to see the rest; the watched row shows the lease.
      // The page refreshes on its own clock: it may first show the cut of the replicas whose lists filled first
      // (a non-signer holds a lease only once it joins), so poll until it names all four.
      await page.waitForSelector('#leases-cut:not([hidden])', PAGE_WAIT);
      await expect
        .poll(async () => page.textContent('#leases-cut'), PAGE_WAIT)
        .toMatch(
          /^Replicas 1, 2, 3, 4 listed only the 32 leases ending last .* --watch RESOURCE .* quorumfence status RESOURCE\.$/,
        );
      expect(json.watched).toEqual([
        expect.objectContaining({ resource: WATCHED, leased: true, epoch: String(honest.lease.epoch), listed: false }),
      ]);
      await page.waitForSelector(`#watched tr[data-resource="${WATCHED}"][data-leased="true"]`, PAGE_WAIT);
      const line = await shownStatusLine(page);
      expect(line.reasons).toContain('lease_lists_cut');
      expect(line.actions.map((a) => [a.code, a.runbook])).toContainEqual(['watch_resources', 'lease-list-cut']);
      await screenshot(page, 'leases-cut');
    } finally {
      await flooder.close();
      await honest.lease.release();
    }
    await expect.poll(async () => (await state(setup)).leaseLists.cut, PAGE_WAIT).toEqual([]);
  }, 120_000);

  it('replica 2 partitioned from the console: hung (connection open, no answer), degraded, not faulty, margin 0', async () => {
    const { page, proxy } = setup;
    proxy!.partition(true);
    try {
      await expect.poll(async () => (await shownReplica(page, 2))?.reachable, SETTLE_WITHIN).toBe('false');
      await holdsFor(page, [2], 0, 'hung', 'degraded');
      const line = await shownStatusLine(page);
      expect(line.headline).toMatch(
        /^Degraded: acquires work, but one more replica lost stops them \(replica 2 is hung\)\.$/,
      );
      expect(line.actions[0]).toMatchObject({ code: 'investigate_hung', runbook: 'replica-hung' });
      await screenshot(page, 'partition');
    } finally {
      proxy!.partition(false);
    }
    await expect.poll(() => page.textContent('#margin'), PAGE_WAIT).toBe('1');
  }, 60_000);

  it('a replica stopped (SIGSTOP): hung, told apart from a dead one, and back when it continues', async () => {
    const { page } = setup;
    await setup.replicas.replica(3).kill('SIGSTOP');
    try {
      await expect.poll(async () => (await shownReplica(page, 3))?.unreachable, SETTLE_WITHIN).toBe('hung');
      await holdsFor(page, [3], 0, 'hung', 'degraded');
      expect((await shownReplica(page, 3))!.text).toContain('hung: connection open, no answer within 1.0 s');
      expect((await shownStatusLine(page)).actions[0]).toMatchObject({
        code: 'investigate_hung',
        runbook: 'replica-hung',
      });
      await screenshot(page, 'hung');
    } finally {
      await setup.replicas.replica(3).kill('SIGCONT');
    }
    await expect.poll(async () => (await shownStatusLine(page)).status, PAGE_WAIT).toBe('healthy');
  }, 60_000);

  it('a replica killed while it co-signed running leases: margin 0 within 8 s, no survivor faulty, for as long as it is down', async () => {
    const { page } = setup;
    const leases = await holdLeases(setup, 'kill/', 4);
    // A direct (not proxied) replica that lists the leases: with it gone, 2f+1 = 3 still list each of them.
    const victim = leases[0]!.reportedBy.find((r) => r !== 2)!;
    await setup.replicas.replica(victim).kill('SIGKILL');
    try {
      await expect.poll(async () => (await shownReplica(page, victim))?.reachable, SETTLE_WITHIN).toBe('false');
      await expect.poll(() => page.textContent('#margin'), SETTLE_WITHIN).toBe('0');
      await holdsFor(page, [victim], 0, 'down', 'degraded');
      // Down (refused), not hung: restart it.
      const line = await shownStatusLine(page);
      expect(line.actions[0]).toMatchObject({ code: 'restart', runbook: 'replica-down' });
      expect((await shownReplica(page, victim))!.text).toContain('connection refused');
      // Its leases are still shown, listed by the three others, and none at risk: t replicas still hold each.
      const shown = (await state(setup)).leases.filter((l) => l.resource.startsWith('kill/'));
      expect(shown.map((l) => l.reportedBy.length)).toEqual(leases.map(() => 3));
      const metrics = await (await fetch(`${setup.console.url}/metrics`)).text();
      expect(metrics).toMatch(/quorumfence_console_quorum_margin\{[^}]*\} 0\n/);
      await screenshot(page, 'kill');
    } finally {
      await setup.replicas.replica(victim).start();
    }
    await expect.poll(() => page.textContent('#margin'), PAGE_WAIT).toBe('1');
    // The console logged the replica lost and back (stable field names, docs/console.md "Logs").
    const events = setup.console
      .stderr()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { event?: string; replica?: number });
    expect(events).toContainEqual(expect.objectContaining({ event: 'replica_unreachable', replica: victim }));
    expect(events).toContainEqual(expect.objectContaining({ event: 'replica_reachable', replica: victim }));
    expect(events).toContainEqual(expect.objectContaining({ event: 'status_changed', status: 'degraded' }));
    expect(events.filter((e) => e.event === 'replica_faulty')).toEqual([]);
  }, 90_000);

  it('two of four killed: within 5 s the status line says acquires are failing and which replicas to bring back', async () => {
    const { page } = setup;
    const leases = await holdLeases(setup, 'two/', 4);
    // Two victims (not replica 2, whose link runs through the proxy) that leave some lease listed by exactly 2:
    // one replica that lists it and one that does not (or, as every replica lists it, two that do).
    const everyone = [1, 2, 3, 4];
    const pick = leases
      .map((l) => ({ l, outside: everyone.filter((r) => !l.reportedBy.includes(r)) }))
      .find(({ outside }) => !outside.includes(2));
    if (!pick) throw new Error('every lease was signed without replica 2: acquire more');
    const victims = [...pick.outside, ...pick.l.reportedBy.filter((r) => r !== 2)].slice(0, 2).sort();
    const killed = performance.now();
    await Promise.all(victims.map((v) => setup.replicas.replica(v).kill('SIGKILL')));
    try {
      await expect.poll(async () => (await shownStatusLine(page)).status, UNAVAILABLE_WITHIN).toBe('unavailable');
      const seconds = (performance.now() - killed) / 1000;
      console.log(JSON.stringify({ console: { unavailableShownAfterSeconds: Math.round(seconds * 100) / 100 } }));
      const line = await shownStatusLine(page);
      expect(line.textClass).toBe('bad');
      expect(line.headline).toMatch(
        /^Unavailable: acquires are failing\. 2 of 4 replicas answer honestly, an acquire needs 3 \(replicas \d and \d are down\)\.$/,
      );
      expect(line.actions[0]).toMatchObject({ code: 'bring_back', runbook: 'acquires-failing' });
      expect(line.actions[0]!.text).toBe(
        `Bring back replica ${victims[0]} or ${victims[1]}: acquires work again once 3 replicas answer. runbook`,
      );
      // The action's link goes to its runbook on the page.
      expect(await page.getAttribute('#actions li[data-action="bring_back"] a', 'href')).toBe(
        '#runbook-acquires-failing',
      );
      expect(await page.textContent('#runbook-acquires-failing h3')).toMatch(/^Acquires are failing/);
      const json = await state(setup);
      expect(json.status).toBe('unavailable');
      expect(json.actions[0]!.replicas).toEqual(victims);
      // The alerts tile is not green: the margin alerts are pending, with the time they fire.
      await expect.poll(() => page.getAttribute('#alertCount', 'class'), PAGE_WAIT).toMatch(/warn|bad/);
      expect(await page.textContent('#alertPending')).toMatch(/^\d+ pending, the first fires at \d\d:\d\d:\d\d UTC$/);
      // The lease the two survivors list (f+1 = 2, fewer than t = 3) is shown, and at risk.
      await page.waitForSelector(`#leases tr[data-resource="${pick.l.resource}"][data-at-risk="true"]`, PAGE_WAIT);
      expect((await shownStatusLine(page)).reasons).toContain('leases_at_risk');
      await screenshot(page, 'two-down');
      expect(await narrowScreenshot(page, 'two-down')).toBeLessThanOrEqual(390);
    } finally {
      await Promise.all(victims.map((v) => setup.replicas.replica(v).start()));
    }
    await expect.poll(async () => (await shownStatusLine(page)).status, PAGE_WAIT).not.toBe('unavailable');
  }, 120_000);

  it('the console restarted on its --data: the charts keep the minutes before, and say when there was no poll', async () => {
    const { page } = setup;
    const before = await state(setup);
    expect(before.persistence.enabled).toBe(true);
    const firstBucket = before.history.points[0]!.at;
    const buckets = before.history.points.length;
    await restartConsole(setup);
    // At once, before its first poll is charted: the earlier buckets are back.
    const after = await state(setup);
    expect(after.persistence.restoredFrom).not.toBeNull();
    expect(after.history.points[0]!.at).toBe(firstBucket);
    expect(after.history.points.length).toBeGreaterThanOrEqual(buckets);
    await expect
      .poll(() => page.textContent('#history-note'), PAGE_WAIT)
      .toMatch(/Restored at this console’s start from --data/);
    await page.waitForSelector('#chart-margin circle', PAGE_WAIT);
    await screenshot(page, 'restarted');
  }, 60_000);

  it('the console process stopped: every tile greyed as stale, none green, until it answers again', async () => {
    const { page } = setup;
    await expect.poll(() => page.getAttribute('body', 'data-stale'), PAGE_WAIT).toBe('false');
    // The earlier tests' killed replicas are back by now, or soon: green first, so that the grey below is news.
    await expect.poll(() => page.getAttribute('#margin', 'class'), PAGE_WAIT).toContain('ok');
    setup.console.process.kill('SIGSTOP');
    try {
      await expect.poll(() => page.getAttribute('body', 'data-stale'), SETTLE_WITHIN).toBe('true');
      const tiles = await page.$$eval('.tile .big', (nodes) =>
        nodes.map((n) => n.ownerDocument.defaultView?.getComputedStyle(n).color),
      );
      // #8c959f, the stale grey, on every tile: not the green (#1a7f37) the margin had a second ago.
      expect(tiles).toEqual(tiles.map(() => 'rgb(140, 149, 159)'));
      // The status line too: its last word greyed, not left green.
      expect(await page.$eval('#headline', (n) => n.ownerDocument.defaultView?.getComputedStyle(n).color)).toBe(
        'rgb(140, 149, 159)',
      );
      expect(await page.textContent('#status')).toMatch(/^STALE: the console does not answer/);
      await screenshot(page, 'stopped');
    } finally {
      setup.console.process.kill('SIGCONT');
    }
    await expect.poll(() => page.getAttribute('body', 'data-stale'), PAGE_WAIT).toBe('false');
  }, 60_000);
});

describe.skipIf(lacks('chromium'))(`the console in Chromium under faults, N = 7 ${needs('chromium')}`, () => {
  let setup: Setup;
  beforeAll(async () => {
    setup = await setUp(7);
  }, 180_000);
  afterAll(() => tearDown(setup), 60_000);

  it('one replica down: degraded in amber though 1 more may fail, not every tile green (issue 46 item 6)', async () => {
    const { page } = setup;
    await expect.poll(() => page.textContent('#margin'), PAGE_WAIT).toBe('2');
    expect(await page.getAttribute('#margin', 'class')).toContain('ok');
    await setup.replicas.replica(7).kill('SIGKILL');
    try {
      await expect.poll(() => page.textContent('#margin'), SETTLE_WITHIN).toBe('1');
      await holdsFor(page, [7], 1, 'down', 'degraded');
      expect(await page.getAttribute('#margin', 'class')).toContain('warn');
      expect(await page.getAttribute('#available', 'class')).toContain('warn');
      expect((await shownStatusLine(page)).headline).toBe(
        'Degraded: acquires work and 1 more replica may fail, but not every replica is available (replica 7 is down).',
      );
      await screenshot(page, 'n7-one-down');
    } finally {
      await setup.replicas.replica(7).start();
    }
    await expect.poll(async () => (await shownStatusLine(page)).status, PAGE_WAIT).toBe('healthy');
  }, 120_000);

  it('two co-signers of running leases killed: margin 0 within 8 s, nobody faulty, for as long as they are down', async () => {
    const { page } = setup;
    await expect.poll(() => page.textContent('#margin'), PAGE_WAIT).toBe('2');
    const leases = await holdLeases(setup, 'orders/', 4);
    // Two of the seven replicas that list a lease: the other five (t) are all that list it now.
    const victims = leases[0]!.reportedBy.slice(0, 2);
    await Promise.all(victims.map((v) => setup.replicas.replica(v).kill('SIGKILL')));
    await expect.poll(() => page.textContent('#margin'), SETTLE_WITHIN).toBe('0');
    await holdsFor(page, victims, 0, 'down', 'degraded');
    await screenshot(page, 'n7-two-down');
  }, 120_000);
});

describe.skipIf(lacks('chromium'))(
  `the console in Chromium: a replica sending malformed answers ${needs('chromium')}`,
  () => {
    const root = mkdtempSync(join(tmpdir(), 'qf-console-malformed-'));
    let honest: LocalCluster;
    let byzantine: LocalCluster;
    let consoleProcess: ConsoleProcess;
    let browser: ConsoleBrowser;

    beforeAll(async () => {
      const keys = join(root, 'keys');
      dealLocalCluster(keys, 4);
      // Replica 4 answers half its requests with a malformed frame (random bytes, text, a wrong version, bad fields):
      // sometimes its lease list is fine and a status answer of the same poll is not.
      [honest, byzantine] = await Promise.all([
        startLocalCluster({
          dir: keys,
          indices: [1, 2, 3],
          dataRoot: join(root, 'data'),
          extraArgs: FAST,
          newStores: true,
        }),
        startLocalCluster({
          dir: keys,
          indices: [4],
          dataRoot: join(root, 'data'),
          entry: byzantineEntryPoint(),
          extraArgs: [...FAST, '--behaviour', 'malformed', '--rate', '0.5', '--seed', '46'],
        }),
      ]);
      const cluster = withEndpoints(
        loadClusterFile(join(keys, 'cluster.json')),
        [1, 2, 3, 4].map((i) => (i === 4 ? byzantine : honest).replica(i).url),
      );
      const clusterFile = join(root, 'cluster.json');
      writeFileSync(clusterFile, JSON.stringify(clusterToJson(cluster)));
      const identityFile = join(root, 'console.identity');
      createIdentityFile(identityFile);
      // A watched resource gives every poll a status round besides the lease list: more answers to break.
      consoleProcess = await startConsoleProcess(clusterFile, identityFile, ['--watch', 'orders/1']);
      browser = await openConsoleBrowser();
      await browser.page.goto(consoleProcess.url + '/');
    }, 120_000);

    afterAll(async () => {
      await browser?.close();
      await consoleProcess?.stop();
      await Promise.allSettled([honest?.close(), byzantine?.close()]);
      rmSync(root, { recursive: true, force: true });
    }, 60_000);

    it('is faulty with evidence to download, counted in quorumfence_console_evidence_total, its alert firing, and stays so', async () => {
      const { page } = browser;
      await page.waitForSelector('tr[data-replica="4"][data-faulty="true"]', PAGE_WAIT);
      const url = consoleProcess.url;
      const until = performance.now() + WATCH_MS;
      let checks = 0;
      // Poll after poll: faulty, never back to ok or merely unreachable, and the margin never flapping back to 1.
      while (performance.now() < until || checks < 3) {
        const row = (await shownReplica(page, 4))!;
        expect(row.faulty).toBe('true');
        expect(row.reason).toMatch(/^broke the protocol: /);
        expect(await page.textContent('#margin')).toBe('0');
        expect((await shownReplicas(page))[0]!.replica).toBe('4');
        checks++;
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
      const json = (await (await fetch(`${url}/api/state`)).json()) as ConsoleState;
      expect(json.replicas.filter((r) => r.faulty !== null).map((r) => r.replica)).toEqual([4]);
      expect(json.status).toBe('degraded');
      const line = await shownStatusLine(page);
      expect([line.status, line.textClass]).toEqual(['degraded', 'warn']);
      expect(line.actions[0]).toMatchObject({ code: 'replace', runbook: 'replica-faulty' });
      // The evidence: one protocol item (the first proof of its kind), downloadable as the console's record.
      const protocol = json.evidence.filter((e) => e.kind === 'protocol');
      expect(protocol.map((e) => e.replica)).toEqual([4]);
      await page.waitForSelector(
        `#evidence tr[data-kind="protocol"] a[href="/api/evidence/${protocol[0]!.id}.json"]`,
        PAGE_WAIT,
      );
      const download = await fetch(`${url}/api/evidence/${protocol[0]!.id}.json`);
      expect(download.headers.get('content-disposition')).toBe(
        `attachment; filename="protocol-replica-4-${protocol[0]!.id}.json"`,
      );
      expect(await download.json()).toMatchObject({
        format: 'quorumfence/console-observation/v1',
        replica: 4,
        kind: 'protocol',
        reason: expect.stringMatching(/^broke the protocol: /),
      });
      // Counted, and alerted by the shipped rule; the signature rule stays quiet (no signature was involved).
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(metrics).toMatch(/quorumfence_console_evidence_total\{kind="protocol"[^}]*\} 1\n/);
      expect(metrics).toMatch(/quorumfence_console_replica_faulty\{replica="4"[^}]*\} 1\n/);
      await page.waitForSelector('#alerts tr[data-alert="QuorumFenceReplicaFaulty"][data-state="firing"]', PAGE_WAIT);
      expect(json.alerts.find((a) => a.alert === 'QuorumFenceEquivocationEvidence')!.state).toBe('inactive');
      await screenshot(page, 'malformed');
    }, 60_000);
  },
);
