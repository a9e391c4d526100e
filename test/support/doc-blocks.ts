/**
 * The code blocks of the documentation that are marked runnable (docs/README.md, "Runnable examples"): a
 * fence whose info string is `sh runnable`, `js runnable` or `ts runnable`, with optional attributes
 * (`cluster`, `lock=RESOURCE`). Read from the markdown at test time, so an example cannot drift from what
 * the test runs. Also the one change the test makes to a block: its example ports, mapped to free ones.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

export type BlockLanguage = 'sh' | 'js' | 'ts';

export interface DocBlock {
  /** Path from the repository root. */
  readonly file: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly language: BlockLanguage;
  /** Runs against the suite's shared cluster (cluster/cluster.json, me.key, the resource) instead of its own. */
  readonly cluster: boolean;
  /** Run under `quorumfence lock RESOURCE -- node ...` (the token in QUORUMFENCE_TOKEN). */
  readonly lock: string | undefined;
  readonly code: string;
}

/**
 * The ports examples are written with: the replicas of a local cluster (keygen's default base port), the
 * ceremony's, the reference resource's and the console's. The test maps each to a free port (a shared-cluster
 * block: the replicas' and the resource's to the running ones).
 */
export const EXAMPLE_PORTS = {
  replicas: [7101, 7102, 7103, 7104],
  ceremony: [7201, 7202, 7203, 7204],
  resource: 8080,
  console: 7460,
} as const;

const FENCE = /^(\s*)(`{3,}|~{3,})(.*)$/;
const LANGUAGES: readonly string[] = ['sh', 'js', 'ts'];

/**
 * Every runnable block of one markdown text. Fences nest as CommonMark says: a block closes at a fence of the
 * same character at least as long, with nothing after it. Pure.
 * @throws Error for a block marked runnable in a language the test cannot run, or an unknown attribute
 */
export function runnableBlocks(file: string, markdown: string): DocBlock[] {
  const blocks: DocBlock[] = [];
  const lines = markdown.split('\n');
  for (let k = 0; k < lines.length; k++) {
    const open = FENCE.exec(lines[k]!);
    if (!open) continue;
    const fence = open[2]!;
    const words = open[3]!.trim().split(/\s+/).filter(Boolean);
    const body: string[] = [];
    let end = k + 1;
    for (; end < lines.length; end++) {
      const close = FENCE.exec(lines[end]!);
      if (close && close[2]![0] === fence[0] && close[2]!.length >= fence.length && close[3]!.trim() === '') break;
      body.push(lines[end]!);
    }
    if (words.includes('runnable')) {
      const [language, ...attributes] = words.filter((w) => w !== 'runnable');
      if (language === undefined || !LANGUAGES.includes(language))
        throw new Error(`${file}:${k + 1}: a runnable block must be sh, js or ts, not ${language ?? 'unnamed'}`);
      let cluster = false;
      let lock: string | undefined;
      for (const attribute of attributes) {
        if (attribute === 'cluster') cluster = true;
        else if (attribute.startsWith('lock=')) lock = attribute.slice('lock='.length);
        else throw new Error(`${file}:${k + 1}: unknown attribute "${attribute}" (cluster, lock=RESOURCE)`);
      }
      if (lock !== undefined && language === 'sh')
        throw new Error(`${file}:${k + 1}: lock= is for js and ts blocks; a shell block runs quorumfence lock itself`);
      blocks.push({
        file,
        line: k + 1,
        language: language as BlockLanguage,
        cluster,
        lock,
        code: body.join('\n') + '\n',
      });
    }
    k = end;
  }
  return blocks;
}

/** The markdown files whose runnable blocks are run: README.md, docs/*.md, src/*\/README.md. */
export function documentationFiles(root: string): string[] {
  const docs = readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => join(root, 'docs', name));
  const folders = readdirSync(join(root, 'src'), { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => join(root, 'src', entry.name, 'README.md'))
    .filter((path) => {
      try {
        readFileSync(path);
        return true;
      } catch {
        return false;
      }
    });
  return [join(root, 'README.md'), ...docs.sort(), ...folders.sort()];
}

/** Every runnable block of the repository's documentation. */
export function repositoryBlocks(root: string): DocBlock[] {
  return documentationFiles(root).flatMap((path) => runnableBlocks(relative(root, path), readFileSync(path, 'utf8')));
}

/** The example ports a block names, as whole numbers. Pure. */
export function examplePortsIn(code: string): number[] {
  const all = [...EXAMPLE_PORTS.replicas, ...EXAMPLE_PORTS.ceremony, EXAMPLE_PORTS.resource, EXAMPLE_PORTS.console];
  return all.filter((port) => new RegExp(`(?<!\\d)${port}(?!\\d)`).test(code));
}

/** Replaces each example port (a whole number) by its mapped port. Pure. */
export function mapPorts(code: string, ports: ReadonlyMap<number, number>): string {
  if (ports.size === 0) return code;
  const pattern = new RegExp(`(?<!\\d)(${[...ports.keys()].join('|')})(?!\\d)`, 'g');
  return code.replace(pattern, (port) => String(ports.get(Number(port))));
}
