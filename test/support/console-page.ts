/**
 * The operator console as its browser tests drive it: `quorumfence console` as a real process (its url from
 * the line it prints), Debian's chromium through playwright-core with a fresh profile in a temporary folder,
 * the replica rows as the page shows them, and screenshots kept under test-artefacts/ by scenario name.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { chromiumLaunchOptions } from './chromium.js';
import { CLI_PATH } from './cli.js';

export const ARTEFACTS = fileURLToPath(new URL('../../test-artefacts/', import.meta.url));

/** Page checks wait this long (a loaded 2-core box, a poll interval of 500 ms). */
export const PAGE_WAIT = { timeout: 20_000 };

export interface ConsoleBrowser {
  readonly page: Page;
  close(): Promise<void>;
}

/** Headless chromium with its own profile in a temporary folder (removed by close), one page open. */
export async function openConsoleBrowser(): Promise<ConsoleBrowser> {
  const profile = mkdtempSync(join(tmpdir(), 'qf-chromium-'));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, {
      ...chromiumLaunchOptions(profile),
      viewport: { width: 1400, height: 1000 },
    });
  } catch (error) {
    rmSync(profile, { recursive: true, force: true });
    throw error;
  }
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    page,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

export interface ConsoleProcess {
  readonly url: string;
  readonly process: ChildProcess;
  /** The last lines it wrote to stderr (its JSON log). */
  stderr(): string;
  stop(): Promise<void>;
}

/** Starts `quorumfence console` on `listen` (127.0.0.1, port 0), polling every 500 ms; resolves with the url it prints. */
export function startConsoleProcess(
  clusterFile: string,
  identityFile: string,
  extraArgs: readonly string[] = [],
  listen = '127.0.0.1:0',
) {
  const child = spawn(
    process.execPath,
    [
      CLI_PATH,
      'console',
      '--cluster',
      clusterFile,
      '--identity',
      identityFile,
      '--listen',
      listen,
      '--interval',
      '500ms',
      '--timeout',
      '1s',
      ...extraArgs,
    ],
    { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, QUORUMFENCE_EXIT_WITH_STDIN: '1' } },
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-64_000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return new Promise<ConsoleProcess>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the console did not start:\n${stderr}`)), 30_000);
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /serving (http:\/\/127\.0\.0\.1:\d+)\//.exec(out);
      if (!match) return;
      clearTimeout(timer);
      resolve({
        url: match[1]!,
        process: child,
        stderr: () => stderr,
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill('SIGCONT');
          child.kill('SIGTERM');
          await exited;
        },
      });
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the console exited with ${code}:\n${stderr}`));
    });
  });
}

export interface ShownReplica {
  readonly replica: string | null;
  readonly faulty: string | null;
  readonly reachable: string | null;
  /** hung, down, login_refused, or '' when reachable. */
  readonly unreachable: string | null;
  readonly reason: string | null;
  readonly downSince: string | null;
  readonly text: string;
}

/** The replica rows as the page shows them, in its order (worst first). Checks go through Playwright: the page's CSP forbids eval. */
export function shownReplicas(page: Page): Promise<ShownReplica[]> {
  return page.$$eval('#replicas tr[data-replica]', (trs) =>
    trs.map((tr) => ({
      replica: tr.getAttribute('data-replica'),
      faulty: tr.getAttribute('data-faulty'),
      reachable: tr.getAttribute('data-reachable'),
      unreachable: tr.getAttribute('data-unreachable'),
      reason: tr.querySelector('.reason')?.textContent ?? null,
      downSince: tr.querySelector('.down-since')?.textContent ?? null,
      text: tr.textContent ?? '',
    })),
  );
}

/** Replica `index`'s row as the page shows it (the rows are in the page's order, worst first). */
export async function shownReplica(page: Page, index: number): Promise<ShownReplica | undefined> {
  return (await shownReplicas(page)).find((r) => r.replica === String(index));
}

export interface ShownStatusLine {
  /** healthy, degraded, unavailable (data-status). */
  readonly status: string | null;
  /** The headline's text class: ok, warn or bad. */
  readonly textClass: string | null;
  readonly headline: string;
  readonly reasons: string[];
  readonly actions: { readonly code: string | null; readonly runbook: string | null; readonly text: string }[];
}

/** The status line at the top of the page. */
export function shownStatusLine(page: Page): Promise<ShownStatusLine> {
  return page.$eval('#situation', (section) => ({
    status: section.getAttribute('data-status'),
    textClass: section.querySelector('#headline')?.getAttribute('class') ?? null,
    headline: section.querySelector('#headline')?.textContent ?? '',
    reasons: [...section.querySelectorAll('#reasons li')].map((li) => li.getAttribute('data-reason') ?? ''),
    actions: [...section.querySelectorAll('#actions li')].map((li) => ({
      code: li.getAttribute('data-action'),
      runbook: li.getAttribute('data-runbook'),
      text: li.textContent ?? '',
    })),
  }));
}

/**
 * Checks that the page fits a 390 px wide phone (nothing wider than the viewport: tables scroll in their own box) and
 * saves test-artefacts/console-<scenario>-390.png; the viewport is put back after.
 */
export async function narrowScreenshot(page: Page, scenario: string): Promise<number> {
  const before = page.viewportSize();
  await page.setViewportSize({ width: 390, height: 844 });
  try {
    // Two renders (one a second) at the new width.
    await page.waitForTimeout(2_100);
    const width = await page.$eval('html', (html) => html.scrollWidth);
    mkdirSync(ARTEFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTEFACTS, `console-${scenario}-390.png`), fullPage: true });
    return width;
  } finally {
    if (before) await page.setViewportSize(before);
  }
}

/** Saves a full-page screenshot as test-artefacts/console-<scenario>.png. */
export async function screenshot(page: Page, scenario: string): Promise<void> {
  mkdirSync(ARTEFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTEFACTS, `console-${scenario}.png`), fullPage: true });
}
