/**
 * The code blocks of the documentation: every fenced block of a markdown file, which of them are commands (a
 * shell, JavaScript or TypeScript block, or an unlabelled block holding a command line), and which are marked
 * runnable (docs/README.md, "Runnable examples"): a fence whose info string is `sh runnable`, `js runnable` or
 * `ts runnable`, with optional attributes (`cluster`, `lock=RESOURCE`, `script=NAME`, `checkout=PATH`). Read
 * from the markdown at test time, so an example cannot drift from what the test runs. Also the one change the
 * test makes to a block: its example ports, mapped to free ones.
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
  /** js, ts: the file name the prose gives the script (`guard.mjs`, `guard.mts`); default example.mjs / example.mts. */
  readonly script: string | undefined;
  /** sh: a path, relative to the block's folder, where the prose says a clone of this repository is (`../quorumfence`). */
  readonly checkout: string | undefined;
  readonly code: string;
}

/** Any fenced block: its info string's first word (the language, if any) and the rest. */
export interface FencedBlock {
  readonly file: string;
  readonly line: number;
  /** Undefined for a fence with no info string. */
  readonly language: string | undefined;
  readonly attributes: readonly string[];
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

/** The languages of command blocks: each must run in a test or be listed with the reason it cannot. */
export const COMMAND_LANGUAGES: readonly string[] = [
  'sh',
  'bash',
  'shell',
  'console',
  'js',
  'mjs',
  'cjs',
  'javascript',
  'ts',
  'mts',
  'typescript',
];
/** The languages of blocks that are not commands: formats, diagrams, data, files. */
export const TEXT_LANGUAGES: readonly string[] = ['text', 'mermaid', 'json', 'sql', 'ini', 'yaml'];

/**
 * The first words of command lines: an unlabelled block holding a line that starts with one (or with "$ ") is a
 * command block, so a command cannot escape the check by losing its label.
 */
const COMMAND_WORDS = [
  'quorumfence',
  'quorumfence-dev',
  'npx',
  'npm',
  'node',
  'curl',
  'kubectl',
  'docker',
  'docker-compose',
  'openssl',
  'systemctl',
  'export',
  'cd',
  'for',
  'sudo',
];

const FENCE = /^(\s*)(`{3,}|~{3,})(.*)$/;
const RUNNABLE_LANGUAGES: readonly string[] = ['sh', 'js', 'ts'];

/**
 * Every fenced block of one markdown text. Fences nest as CommonMark says: a block closes at a fence of the
 * same character at least as long, with nothing after it. Pure.
 */
export function fencedBlocks(file: string, markdown: string): FencedBlock[] {
  const blocks: FencedBlock[] = [];
  const lines = markdown.split('\n');
  for (let k = 0; k < lines.length; k++) {
    const open = FENCE.exec(lines[k]!);
    if (!open) continue;
    const indent = open[1]!.length;
    const fence = open[2]!;
    const [language, ...attributes] = open[3]!.trim().split(/\s+/).filter(Boolean);
    const body: string[] = [];
    let end = k + 1;
    for (; end < lines.length; end++) {
      const close = FENCE.exec(lines[end]!);
      if (close && close[2]![0] === fence[0] && close[2]!.length >= fence.length && close[3]!.trim() === '') break;
      // A fence indented inside a list item: its lines carry the same indent.
      body.push(lines[end]!.slice(Math.min(indent, /^\s*/.exec(lines[end]!)![0].length)));
    }
    blocks.push({ file, line: k + 1, language, attributes, code: body.join('\n') + '\n' });
    k = end;
  }
  return blocks;
}

/**
 * Whether a block is a command block: labelled with a command language, or unlabelled and holding a command
 * line. Pure.
 * @throws Error for a label that is neither a command language nor a known text one (say what the block is)
 */
export function isCommandBlock(block: FencedBlock): boolean {
  if (block.language === undefined)
    return block.code
      .split('\n')
      .some((line) => line.trimStart().startsWith('$ ') || COMMAND_WORDS.includes(line.trim().split(/\s+/)[0]!));
  if (COMMAND_LANGUAGES.includes(block.language)) return true;
  if (TEXT_LANGUAGES.includes(block.language)) return false;
  throw new Error(
    `${block.file}:${block.line}: a block labelled "${block.language}": label commands ${COMMAND_LANGUAGES.join(', ')} and everything else ${TEXT_LANGUAGES.join(', ')}`,
  );
}

/**
 * Every runnable block of one markdown text. Pure.
 * @throws Error for a block marked runnable in a language the test cannot run, or an unknown attribute
 */
export function runnableBlocks(file: string, markdown: string): DocBlock[] {
  return fencedBlocks(file, markdown).flatMap((block) => {
    const words = [block.language, ...block.attributes];
    if (!words.includes('runnable')) return [];
    const [language, ...attributes] = words.filter((w) => w !== 'runnable');
    const where = `${file}:${block.line}`;
    if (language === undefined || !RUNNABLE_LANGUAGES.includes(language))
      throw new Error(`${where}: a runnable block must be sh, js or ts, not ${language ?? 'unnamed'}`);
    let cluster = false;
    let lock: string | undefined;
    let script: string | undefined;
    let checkout: string | undefined;
    for (const attribute of attributes) {
      if (attribute === undefined) continue;
      if (attribute === 'cluster') cluster = true;
      else if (attribute.startsWith('lock=')) lock = attribute.slice('lock='.length);
      else if (attribute.startsWith('script=')) script = attribute.slice('script='.length);
      else if (attribute.startsWith('checkout=')) checkout = attribute.slice('checkout='.length);
      else
        throw new Error(
          `${where}: unknown attribute "${attribute}" (cluster, lock=RESOURCE, script=NAME, checkout=PATH)`,
        );
    }
    if (lock !== undefined && language === 'sh')
      throw new Error(`${where}: lock= is for js and ts blocks; a shell block runs quorumfence lock itself`);
    if (script !== undefined && language === 'sh')
      throw new Error(`${where}: script= is for js and ts blocks (the file the script is saved as)`);
    if (script !== undefined && !/^[\w-]+\.(mjs|mts)$/.test(script))
      throw new Error(`${where}: script=${script}: a .mjs (js) or .mts (ts) name, so it runs as an ES module anywhere`);
    if (checkout !== undefined && language !== 'sh') throw new Error(`${where}: checkout= is for shell blocks`);
    return [
      {
        file,
        line: block.line,
        language: language as BlockLanguage,
        cluster,
        lock,
        script,
        checkout,
        code: block.code,
      },
    ];
  });
}

/** The markdown files whose command blocks must run: README.md and docs/*.md. */
export function commandDocumentationFiles(root: string): string[] {
  const docs = readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => join(root, 'docs', name));
  return [join(root, 'README.md'), ...docs.sort()];
}

/** The markdown files whose runnable blocks are run: README.md, docs/*.md, src/*\/README.md. */
export function documentationFiles(root: string): string[] {
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
  return [...commandDocumentationFiles(root), ...folders.sort()];
}

/** Every runnable block of the repository's documentation. */
export function repositoryBlocks(root: string): DocBlock[] {
  return documentationFiles(root).flatMap((path) => runnableBlocks(relative(root, path), readFileSync(path, 'utf8')));
}

/** Every command block of README.md and docs/*.md. */
export function repositoryCommandBlocks(root: string): FencedBlock[] {
  return commandDocumentationFiles(root).flatMap((path) =>
    fencedBlocks(relative(root, path), readFileSync(path, 'utf8')).filter(isCommandBlock),
  );
}

/** A command block that is not run by the runnable-examples test, and why. */
export interface NotRunBlock {
  /** The markdown file, from the repository root. */
  readonly file: string;
  /** The block's first line, which names it (line numbers move as documents are edited). */
  readonly starts: string;
  readonly reason: string;
  /** The test that runs these commands, or their equivalent, instead (a path from the root), if any. */
  readonly runBy?: string;
}

/**
 * The command blocks that are neither runnable nor in `notRun`, and the `notRun` entries that name no block (a
 * stale list hides nothing, but says something false). Pure.
 */
export function uncoveredBlocks(
  blocks: readonly FencedBlock[],
  notRun: readonly NotRunBlock[],
): { unlisted: FencedBlock[]; stale: NotRunBlock[] } {
  const listed = (block: FencedBlock) =>
    notRun.filter((entry) => entry.file === block.file && block.code.trimStart().startsWith(entry.starts));
  const runnable = (block: FencedBlock) => block.attributes.includes('runnable');
  return {
    unlisted: blocks.filter((block) => !runnable(block) && listed(block).length === 0),
    stale: notRun.filter(
      (entry) =>
        blocks.filter((block) => entry.file === block.file && block.code.trimStart().startsWith(entry.starts))
          .length !== 1,
    ),
  };
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
