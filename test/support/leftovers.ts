/**
 * vitest globalSetup: the suite must leave nothing behind. Every test process (and every process a test
 * starts) gets a temp directory of this run's own ($TMPDIR), which must be empty at the end; and the home
 * directory's top level and its XDG folders (~/.config, ~/.cache, ~/.local/share, ~/.pki: where programs such
 * as Chromium write) must hold the same names as before. The run fails naming what was left, and the
 * run's temp directory is removed either way.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';

/** The folders of the home directory whose entries are compared, relative to it ('' = the top level). */
const HOME_FOLDERS = ['', '.config', '.cache', '.local/share', '.pki'];
/** Leftovers named in the failure; more are counted. */
const SHOWN = 40;

function homeEntries(home: string): Set<string> {
  const names = new Set<string>();
  for (const folder of HOME_FOLDERS) {
    try {
      for (const name of readdirSync(join(home, folder))) names.add(join(folder, name));
    } catch {
      // A folder that does not exist holds nothing.
    }
  }
  return names;
}

/** Each entry at the top of `root`, a directory with what it holds ("qf-x-1a2b/ (empty)", "qf-y/ (3 entries: data.mdb, ...)"). */
function describeEntries(root: string): string[] {
  return readdirSync(root, { withFileTypes: true }).map((entry) => {
    if (!entry.isDirectory()) return entry.name;
    const inside = readdirSync(join(root, entry.name));
    if (inside.length === 0) return `${entry.name}/ (empty)`;
    const some = inside.slice(0, 3).join(', ') + (inside.length > 3 ? ', ...' : '');
    return `${entry.name}/ (${inside.length} entr${inside.length === 1 ? 'y' : 'ies'}: ${some})`;
  });
}

function report(what: string, list: readonly string[], hint: string): string {
  const shown = list.slice(0, SHOWN).map((path) => `  ${path}`);
  const more = list.length > SHOWN ? [`  ... and ${list.length - SHOWN} more`] : [];
  return [
    `the test run left ${list.length} entr${list.length === 1 ? 'y' : 'ies'} in ${what}:`,
    ...shown,
    ...more,
    hint,
  ].join('\n');
}

export default function setup(): () => void {
  const home = homedir();
  const before = homeEntries(home);
  const runTemp = mkdtempSync(join(tmpdir(), 'qf-test-run-'));
  // Workers and every process they start inherit it: os.tmpdir() is this folder for the whole run.
  process.env.TMPDIR = runTemp;
  return () => {
    const problems: string[] = [];
    const left = describeEntries(runTemp);
    if (left.length > 0)
      problems.push(
        report(
          `the temp directory (${runTemp}, the run's $TMPDIR)`,
          left,
          'Remove them in the test that made them (rmSync(dir, { recursive: true, force: true }) in its afterAll/afterEach; for mkdtemp(...)/data, the mkdtemp folder).',
        ),
      );
    const added = [...homeEntries(home)].filter((name) => !before.has(name)).sort();
    if (added.length > 0)
      problems.push(
        report(
          `the home directory (${home})`,
          added,
          "A process a test started wrote there: give it a HOME (and XDG_*_HOME) inside the test's temp directory, as test/support/chromium.ts does for Chromium (if another program on this machine wrote there during the run, remove that from the list by hand).",
        ),
      );
    rmSync(runTemp, { recursive: true, force: true });
    if (problems.length > 0) {
      // vitest logs an error thrown here but keeps the exit code: set it, so CI sees the run fail.
      process.exitCode = 1;
      throw new Error(problems.join('\n\n'));
    }
  };
}
