/**
 * The README matches the code: every error code of the one error class and
 * every CLI verb is documented, and every verb answers --help with its usage.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runCli, runDevCli } from '../support/cli.js';

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');
const readme = read('README.md');
const errorCodes = [
  ...read('src/common/errors.ts')
    .slice(read('src/common/errors.ts').indexOf('export type ErrorCode'))
    .split('export class')[0]!
    .matchAll(/\| '([A-Z_]+)'/g),
].map((m) => m[1]!);
const verbsOf = (mainFile: string) =>
  [...read(mainFile).matchAll(/^\s+([a-z-]+): \(\) => import\('\.\/[a-z-]+\.js'\),$/gm)].map((m) => m[1]!);
/** The operator's command, and the development tools' command: neither lists the other's verbs. */
const programs = [
  { program: 'quorumfence', run: runCli, verbs: verbsOf('src/cli/main.ts') },
  { program: 'quorumfence-dev', run: runDevCli, verbs: verbsOf('src/devtools/main.ts') },
] as const;
/** Each program's verb table in the README: the operator's under "## CLI", the tools' under its own heading. */
const DEV_HEADING = '### Development tools: `quorumfence-dev`';
const cliSection = readme.slice(readme.indexOf('## CLI'), readme.indexOf('\n## ', readme.indexOf('## CLI') + 1));
const tableOf = (program: string) =>
  program === 'quorumfence' ? cliSection.split(DEV_HEADING)[0]! : (cliSection.split(DEV_HEADING)[1] ?? '');
const verbs = programs.flatMap(({ program, run, verbs }) => verbs.map((verb) => ({ program, run, verb })));

describe('docs match the code', () => {
  it('finds the codes and verbs it checks', () => {
    expect(errorCodes.length).toBeGreaterThan(25);
    expect(programs[0].verbs).toEqual(
      expect.arrayContaining(['keygen', 'verify', 'replica', 'resource', 'acquire', 'status', 'identity', 'dkg']),
    );
    expect(programs[1].verbs).toEqual(['demo', 'chaos', 'simulate', 'bench', 'worker', 'vectors']);
  });

  it.each(errorCodes)('README documents error code %s', (code) => {
    expect(readme).toContain(`| \`${code}\` |`);
  });

  it.each(verbs)('README documents $program $verb, and it answers --help', async ({ program, run, verb }) => {
    expect(tableOf(program)).toMatch(new RegExp(`\\| \`${verb}[ \`]`));
    const result = await run([verb, '--help']);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(new RegExp(`^usage: ${program} ${verb}`));
  });

  it.each(programs)('$program --help lists its verbs and no other', async ({ run, verbs: own }) => {
    const result = await run(['--help']);
    expect(result.code).toBe(0);
    for (const verb of own) expect(result.stdout).toMatch(new RegExp(`^  ${verb} `, 'm'));
    for (const { verb } of verbs.filter((v) => !own.includes(v.verb)))
      expect(result.stdout).not.toMatch(new RegExp(`^  ${verb} `, 'm'));
  });

  it('a verb typed into the wrong program exits 2 naming the right command, both ways', async () => {
    const dev = await runCli(['chaos']);
    expect(dev.code).toBe(2);
    expect(dev.stderr).toMatch(
      /quorumfence: unknown command "chaos"; "chaos" is a command of quorumfence-dev: run "quorumfence-dev chaos"/,
    );
    const operator = await runDevCli(['replica']);
    expect(operator.code).toBe(2);
    expect(operator.stderr).toMatch(/run "quorumfence replica"/);
  });

  it('each program names exactly the other program verbs in its hint', () => {
    const named = (file: string, constant: string) =>
      JSON.parse(
        read(file)
          .match(new RegExp(`const ${constant} = (\\[[^\\]]*\\])`))![1]!
          .replace(/'/g, '"')
          .replace(/,\s*\]$/, ']'),
      ) as string[];
    expect(named('src/cli/main.ts', 'DEV_VERBS').sort()).toEqual([...programs[1].verbs].sort());
    expect(named('src/devtools/main.ts', 'OPERATOR_VERBS').sort()).toEqual([...programs[0].verbs].sort());
  });
});
