/**
 * The folder rules of src/ that the code must keep (each folder's README says what it must not import). The
 * one this file was written for: the operator's command (src/cli) and the development tools (src/devtools,
 * with what only they use: src/testing, src/bench) never import each other; both build on src/command.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(join(dir, entry.name))
      : entry.name.endsWith('.ts')
        ? [join(dir, entry.name)]
        : [],
  );
}

/** Every relative import (static or dynamic) of every file, as `from folder → to folder`. */
const edges = sourceFiles(SRC).flatMap((file) => {
  const text = readFileSync(file, 'utf8');
  const from = relative(SRC, file).split('/')[0]!;
  return [...text.matchAll(/(?:from|import\()\s*'(\.{1,2}\/[^']+)'/g)].map((m) => {
    const target = relative(SRC, resolve(dirname(file), m[1]!));
    return { file: relative(SRC, file), from, to: target.split('/')[0]! };
  });
});

const RULES: Record<string, readonly string[]> = {
  cli: ['devtools', 'testing', 'bench'],
  devtools: ['cli'],
  testing: ['cli', 'devtools'],
  bench: ['cli', 'devtools'],
  command: ['cli', 'devtools', 'testing', 'bench'],
  client: ['replica', 'guard', 'testing', 'cli', 'devtools'],
  replica: ['client', 'guard', 'testing', 'cli', 'devtools'],
  guard: ['replica', 'client', 'testing', 'cli', 'devtools'],
  token: ['replica', 'client', 'guard', 'protocol'],
  // The console watches through the client's rules; it never reaches into a replica, a guard or the test tools.
  console: ['replica', 'guard', 'testing', 'devtools', 'cli', 'bench', 'ceremony', 'verify'],
  // The simulator runs the production cores; the operator's command and the benchmark never see it.
  simulation: ['cli', 'devtools', 'bench'],
};

/** What a core (src/client/core, docs/testing.md) must never touch: time, timers, randomness, I/O. */
const CORE_FORBIDDEN = [
  /from 'node:/,
  /\bsetTimeout\(/,
  /\bsetImmediate\(/,
  /\bsetInterval\(/,
  /\bDate\.now\(/,
  /\bperformance\.now\(/,
  /\bMath\.random\(/,
  /\bawait\b/,
  /\bnew Promise\b/,
];

/**
 * The client's files that run the cores (drive.ts and the calls built on it): a core importing one of them, even
 * through another file, is a circle with its driver (issue 44).
 */
const CLIENT_DRIVER_FILES = ['client/acquire.ts', 'client/drive.ts', 'client/lease-calls.ts', 'client/client.ts'];

/** The files `file` (relative to src) imports, relative imports only, through any number of files. */
function reachableFrom(file: string): Map<string, string> {
  const via = new Map<string, string>([[file, file]]);
  const queue = [file];
  for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
    const text = readFileSync(join(SRC, next), 'utf8');
    for (const m of text.matchAll(/(?:from|import\()\s*'(\.{1,2}\/[^']+)\.js'/g)) {
      const target = `${relative(SRC, resolve(dirname(join(SRC, next)), m[1]!))}.ts`;
      if (via.has(target)) continue;
      via.set(target, next);
      queue.push(target);
    }
  }
  return via;
}

describe('src folder rules', () => {
  it('reads the import graph', () => {
    expect(edges.length).toBeGreaterThan(200);
    expect(edges.some((e) => e.from === 'devtools' && e.to === 'testing')).toBe(true);
  });

  it.each(Object.entries(RULES))('src/%s imports none of %j', (folder, forbidden) => {
    const broken = edges.filter((e) => e.from === folder && forbidden.includes(e.to)).map((e) => `${e.file} → ${e.to}`);
    expect(broken).toEqual([]);
  });

  it("the client's cores read no clock, set no timer, draw no randomness and await nothing", () => {
    const core = sourceFiles(join(SRC, 'client', 'core'));
    expect(core.length).toBeGreaterThan(5);
    const broken = core.flatMap((file) => {
      // Comments may name what the core does not do.
      const code = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
      return CORE_FORBIDDEN.filter((pattern) => pattern.test(code)).map(
        (pattern) => `${relative(SRC, file)}: ${pattern}`,
      );
    });
    expect(broken).toEqual([]);
  });

  it("the client's cores import none of the files that drive them, directly or through another file", () => {
    const core = sourceFiles(join(SRC, 'client', 'core')).map((file) => relative(SRC, file));
    expect(core).toContain('client/core/acquire.ts');
    const reached = reachableFrom('client/core/acquire.ts');
    expect(reached.has('client/core/attempt.ts')).toBe(true); // the walk follows imports
    const broken = core.flatMap((file) => {
      const via = reachableFrom(file);
      return CLIENT_DRIVER_FILES.filter((driver) => via.has(driver)).map(
        (driver) => `${file} reaches ${driver} (imported by ${via.get(driver)})`,
      );
    });
    expect(broken).toEqual([]);
  });

  it("the replica's core (src/replica/core, issue 44) reads no clock, sets no timer and awaits nothing", () => {
    const core = sourceFiles(join(SRC, 'replica', 'core'));
    expect(core.length).toBeGreaterThan(0);
    const broken = core.flatMap((file) => {
      const code = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
      // Of the replica it reads only the rules' shapes: no store, signer, lease table or line.
      const replicaImports = [...code.matchAll(/from '\.\.\/([\w-]+)\.js'/g)].map((match) => match[1]);
      return [
        ...CORE_FORBIDDEN.filter((pattern) => pattern.test(code)).map(
          (pattern) => `${relative(SRC, file)}: ${pattern}`,
        ),
        ...replicaImports
          .filter((name) => name !== 'policy-types')
          .map((name) => `${relative(SRC, file)} imports ../${name}.js`),
      ];
    });
    expect(broken).toEqual([]);
  });
});
