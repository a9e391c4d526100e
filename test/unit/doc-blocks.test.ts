/**
 * How the runnable-examples test reads the documentation (test/support/doc-blocks.ts): which fences are
 * runnable, their attributes, nested fences, and the one change it makes, example ports as whole numbers.
 */
import { describe, expect, it } from 'vitest';
import {
  examplePortsIn,
  fencedBlocks,
  isCommandBlock,
  mapPorts,
  runnableBlocks,
  uncoveredBlocks,
} from '../support/doc-blocks.js';

const markdown = [
  '# Title',
  '```sh',
  'echo not runnable',
  '```',
  '```sh runnable',
  'echo one',
  '```',
  '````md',
  '```js runnable',
  'inside a four-backtick block: not a block of its own',
  '```',
  '````',
  '```ts runnable cluster lock=orders/eu',
  'const x: number = 1; // ``` not a close',
  '```',
].join('\n');

describe('runnable blocks', () => {
  it('finds the fences marked runnable, with their line, language and attributes, and nothing inside another fence', () => {
    expect(runnableBlocks('doc.md', markdown)).toEqual([
      {
        file: 'doc.md',
        line: 5,
        language: 'sh',
        cluster: false,
        lock: undefined,
        script: undefined,
        checkout: undefined,
        code: 'echo one\n',
      },
      {
        file: 'doc.md',
        line: 13,
        language: 'ts',
        cluster: true,
        lock: 'orders/eu',
        script: undefined,
        checkout: undefined,
        code: 'const x: number = 1; // ``` not a close\n',
      },
    ]);
  });

  it('refuses a runnable block it cannot run: another language, an unknown attribute, lock= on a shell block', () => {
    expect(() => runnableBlocks('doc.md', '```python runnable\nx\n```')).toThrow(
      'doc.md:1: a runnable block must be sh, js or ts',
    );
    expect(() => runnableBlocks('doc.md', '\n```js runnable fast\nx\n```')).toThrow(
      'doc.md:2: unknown attribute "fast"',
    );
    expect(() => runnableBlocks('doc.md', '```sh runnable lock=r\nx\n```')).toThrow(/lock= is for js and ts/);
    expect(() => runnableBlocks('doc.md', '```js runnable script=guard.js\nx\n```')).toThrow(/a \.mjs \(js\)/);
    expect(() => runnableBlocks('doc.md', '```js runnable checkout=../q\nx\n```')).toThrow(/checkout= is for shell/);
    expect(runnableBlocks('doc.md', '```sh runnable checkout=../quorumfence\nx\n```')[0]?.checkout).toBe(
      '../quorumfence',
    );
    expect(runnableBlocks('doc.md', '```ts runnable script=guard.mts\nx\n```')[0]?.script).toBe('guard.mts');
  });

  it('a command block is a shell, JavaScript or TypeScript block, or an unlabelled one holding a command line', () => {
    const doc = [
      '```sh',
      'echo labelled',
      '```',
      '```',
      '# an unlabelled block of commands is still one',
      'quorumfence keygen --replicas 4 --out keys',
      '```',
      '```',
      'grant message = "quorumfence/grant/v1" ‖ clusterId',
      '```',
      '```text',
      'npm install (a format, labelled text)',
      '```',
      '1. a list item:',
      '   ```sh',
      '   npx quorumfence health',
      '   ```',
    ].join('\n');
    const blocks = fencedBlocks('doc.md', doc);
    expect(blocks.map((b) => [b.line, isCommandBlock(b)])).toEqual([
      [1, true],
      [4, true],
      [8, false],
      [11, false],
      [15, true],
    ]);
    // A fence inside a list item: its indent is not part of the command.
    expect(blocks[4]!.code).toBe('npx quorumfence health\n');
    expect(() => isCommandBlock(fencedBlocks('doc.md', '```python\nprint(1)\n```')[0]!)).toThrow(
      /doc\.md:1: a block labelled "python"/,
    );
  });

  it('a command block that is neither runnable nor listed with a reason is reported, and so is a list entry that names no block', () => {
    const doc = [
      '```sh runnable',
      'echo runs',
      '```',
      '```sh',
      'kubectl apply -k deploy',
      '```',
      '```sh',
      'echo forgotten',
      '```',
    ].join('\n');
    const blocks = fencedBlocks('doc.md', doc).filter(isCommandBlock);
    const listed = { file: 'doc.md', starts: 'kubectl apply', reason: 'needs Kubernetes' };
    const stale = { file: 'doc.md', starts: 'docker compose up', reason: 'gone' };
    const { unlisted, stale: staleEntries } = uncoveredBlocks(blocks, [listed, stale]);
    expect(unlisted.map((b) => b.line)).toEqual([7]);
    expect(staleEntries).toEqual([stale]);
    expect(uncoveredBlocks(blocks.slice(0, 2), [listed])).toEqual({ unlisted: [], stale: [] });
  });

  it('maps example ports only as whole numbers', () => {
    const code = 'ws://127.0.0.1:7101 --base-port 7101 http://h:8080/x 17101 71010 7460';
    expect(examplePortsIn(code)).toEqual([7101, 8080, 7460]);
    expect(
      mapPorts(
        code,
        new Map([
          [7101, 40001],
          [8080, 40100],
          [7460, 40200],
        ]),
      ),
    ).toBe('ws://127.0.0.1:40001 --base-port 40001 http://h:40100/x 17101 71010 40200');
  });
});
