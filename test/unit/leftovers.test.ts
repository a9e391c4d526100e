/**
 * The suite's leftover check (test/support/leftovers.ts, vitest's globalSetup) fails naming what a run left
 * in its temp directory and in the home directory, and passes when nothing was left.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import setup from '../support/leftovers.js';

const saved = { HOME: process.env.HOME, TMPDIR: process.env.TMPDIR, exitCode: process.exitCode };
let fakeHome: string;

afterEach(() => {
  process.env.HOME = saved.HOME;
  process.env.TMPDIR = saved.TMPDIR;
  process.exitCode = saved.exitCode;
  rmSync(fakeHome, { recursive: true, force: true });
});

/** Runs the check around `during` with a home directory of its own. */
function runCheck(during: (runTemp: string, home: string) => void): () => void {
  fakeHome = mkdtempSync(join(tmpdir(), 'qf-leftovers-home-'));
  mkdirSync(join(fakeHome, '.config', 'existing'), { recursive: true });
  process.env.HOME = fakeHome;
  const teardown = setup();
  const runTemp = process.env.TMPDIR!;
  during(runTemp, fakeHome);
  return teardown;
}

describe('the leftover check', () => {
  it('names an empty folder and a folder with files left in the temp directory, and what appeared in the home directory', () => {
    const teardown = runCheck((runTemp, home) => {
      mkdirSync(join(runTemp, 'qf-empty-1'));
      mkdirSync(join(runTemp, 'qf-full-2'));
      writeFileSync(join(runTemp, 'qf-full-2', 'data.mdb'), 'x');
      mkdirSync(join(home, '.config', 'chromium'));
      writeFileSync(join(home, '.cache-file'), 'x');
    });
    expect(teardown).toThrow(
      /left 2 entries in the temp directory[\s\S]*qf-empty-1\/ \(empty\)[\s\S]*qf-full-2\/ \(1 entry: data\.mdb\)/,
    );
    expect(process.exitCode).toBe(1);
    process.exitCode = saved.exitCode;
  });

  it('home directory: names new entries at its top and in its XDG folders, not the ones that were there', () => {
    const teardown = runCheck((_runTemp, home) => {
      mkdirSync(join(home, '.config', 'chromium'));
      writeFileSync(join(home, '.cache-file'), 'x');
    });
    let message = '';
    try {
      teardown();
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toMatch(/left 2 entries in the home directory/);
    expect(message).toContain('  .cache-file');
    expect(message).toContain(`  ${join('.config', 'chromium')}`);
    expect(message).not.toContain('existing');
  });

  it('passes, and removes its temp directory, when nothing was left', () => {
    let runTempSeen = '';
    const teardown = runCheck((runTemp) => {
      runTempSeen = runTemp;
      mkdirSync(join(runTemp, 'cleaned'));
      rmSync(join(runTemp, 'cleaned'), { recursive: true });
    });
    expect(teardown).not.toThrow();
    expect(() => mkdirSync(join(runTempSeen, 'x'))).toThrow(/ENOENT/);
  });
});
