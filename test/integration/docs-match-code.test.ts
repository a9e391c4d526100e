/**
 * The README matches the code: every error code of the one error class and
 * every CLI verb is documented, and every verb answers --help with its usage.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runCli } from '../support/cli.js';

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');
const readme = read('README.md');
const errorCodes = [
  ...read('src/common/errors.ts')
    .slice(read('src/common/errors.ts').indexOf('export type ErrorCode'))
    .split('export class')[0]!
    .matchAll(/\| '([A-Z_]+)'/g),
].map((m) => m[1]!);
const verbs = [...read('src/cli/main.ts').matchAll(/^\s+([a-z-]+): \(\) => import\('\.\/[a-z-]+\.js'\),$/gm)].map(
  (m) => m[1]!,
);

describe('docs match the code', () => {
  it('finds the codes and verbs it checks', () => {
    expect(errorCodes.length).toBeGreaterThan(25);
    expect(verbs).toEqual(
      expect.arrayContaining([
        'keygen',
        'verify',
        'replica',
        'resource',
        'acquire',
        'status',
        'identity',
        'demo',
        'bench',
      ]),
    );
  });

  it.each(errorCodes)('README documents error code %s', (code) => {
    expect(readme).toContain(`| \`${code}\` |`);
  });

  it.each(verbs)('README documents verb %s, and it answers --help', async (verb) => {
    expect(readme).toMatch(new RegExp(`\\| \`${verb}[ \`]`));
    const result = await runCli([verb, '--help']);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(new RegExp(`^usage: quorumfence ${verb}`));
  });

  it('lists every verb in quorumfence --help', async () => {
    const result = await runCli(['--help']);
    expect(result.code).toBe(0);
    for (const verb of verbs) expect(result.stdout).toMatch(new RegExp(`^  ${verb} `, 'm'));
  });
});
