/**
 * How the runnable-examples test reads the documentation (test/support/doc-blocks.ts): which fences are
 * runnable, their attributes, nested fences, and the one change it makes, example ports as whole numbers.
 */
import { describe, expect, it } from 'vitest';
import { examplePortsIn, mapPorts, runnableBlocks } from '../support/doc-blocks.js';

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
      { file: 'doc.md', line: 5, language: 'sh', cluster: false, lock: undefined, code: 'echo one\n' },
      {
        file: 'doc.md',
        line: 13,
        language: 'ts',
        cluster: true,
        lock: 'orders/eu',
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
