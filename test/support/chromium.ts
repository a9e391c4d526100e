/**
 * The system's headless Chromium for the page tests, driven by playwright-core. Chromium writes into the
 * home directory even with the fresh temporary profile Playwright gives it (crash-report settings under
 * ~/.config/chromium, ~/.cache/dconf): its HOME and XDG folders point into `dir`, which the test removes.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';

function chromiumPath(): string {
  const found = spawnSync('sh', ['-c', 'command -v chromium || command -v chromium-browser'], { encoding: 'utf8' });
  const path = found.stdout.trim();
  if (found.status !== 0 || path === '') throw new Error('chromium is not installed (apt-get install chromium)');
  return path;
}

/**
 * What every page test launches Chromium with: the system binary, flags that keep it off the network (this machine's
 * network is closed: background fetches would be refused, many at a time), and its HOME and XDG folders inside `dir`
 * (created here; the caller removes `dir`).
 */
export function chromiumLaunchOptions(dir: string) {
  const home = join(dir, 'chromium-home');
  mkdirSync(home, { recursive: true });
  return {
    executablePath: chromiumPath(),
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    env: {
      ...process.env,
      HOME: home,
      XDG_CONFIG_HOME: join(home, '.config'),
      XDG_CACHE_HOME: join(home, '.cache'),
      XDG_DATA_HOME: join(home, '.local', 'share'),
    },
  };
}

/** Launches Chromium with its home inside `dir` (created here; the caller removes `dir`). */
export async function launchChromium(dir: string): Promise<Browser> {
  return chromium.launch(chromiumLaunchOptions(dir));
}
