/**
 * What a demo kept running (--keep) leaves behind and asks of the next one:
 * the folder it holds (takeDemoDir refuses to empty a folder a demo still runs
 * in, and marks the ones it made) and the commands printed to use against it.
 * Apart from demo.ts because neither is the demo's story: both are about the
 * folder and the shell around it.
 */
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, relative } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { directoryLockHolder, LOCK_FILES, takeDirectoryLock } from '../command/directory-lock.js';

const MARKER = '.quorumfence-demo';

/**
 * Takes `dir` for this run and empties it; returns the function that gives it back. A demo kept running
 * (--keep) holds `dir/demo.lock`, and its replicas and resource hold their stores' locks: while any of them
 * runs, this refuses (STORE_LOCKED) and deletes nothing, since the running demo would go on over deleted keys
 * and stores and the commands it printed would point at a cluster about to die.
 * @throws QuorumFenceError FILE_EXISTS (a directory the demo did not make), STORE_LOCKED, IO_ERROR
 */
export function takeDemoDir(dir: string): () => void {
  if (existsSync(dir) && readdirSync(dir).length > 0 && !existsSync(join(dir, MARKER)))
    throw new QuorumFenceError('FILE_EXISTS', `${dir} exists and was not made by the demo; choose another --dir`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const elsewhere = `stop it first (Ctrl-C in its terminal), or run this one beside it with --dir OTHER (npm start -- --dir ${relative(process.cwd(), dir) || dir}-2)`;
  let release: () => void;
  try {
    release = takeDirectoryLock(dir, LOCK_FILES.demo, 'demo');
  } catch (error) {
    if (!(error instanceof QuorumFenceError) || error.code !== 'STORE_LOCKED') throw error;
    throw new QuorumFenceError(
      'STORE_LOCKED',
      `a demo is running in ${dir} (process ${String(error.details?.pid)}) and would lose its keys and stores; ${elsewhere}`,
      { dir },
    );
  }
  try {
    const data = join(dir, 'data');
    for (const store of existsSync(data) ? readdirSync(data) : []) {
      const pid =
        directoryLockHolder(join(data, store), LOCK_FILES.replica) ??
        directoryLockHolder(join(data, store), LOCK_FILES.resource);
      if (pid !== undefined)
        throw new QuorumFenceError(
          'STORE_LOCKED',
          `process ${pid} of an earlier demo still runs on ${join(data, store)}; ${elsewhere}`,
          { dir, pid },
        );
    }
    for (const entry of readdirSync(dir))
      if (entry !== LOCK_FILES.demo) rmSync(join(dir, entry), { recursive: true, force: true });
    writeFileSync(join(dir, MARKER), 'made by quorumfence-dev demo; emptied by the next run unless a demo runs here\n');
  } catch (error) {
    release();
    throw error;
  }
  return release;
}

/** A word for a POSIX shell: as is when it needs no quoting, else in single quotes. Pure. */
function shellWord(text: string): string {
  return /^[\w./:@%+=,-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}

/**
 * The commands printed for a kept demo, one per line, each runnable as printed in a POSIX shell from the
 * folder the demo ran in, one after the other: the lease acquire takes is released before lock takes the next.
 * Pure.
 */
export function keptDemoCommands(options: {
  readonly cwd: string;
  readonly clusterFile: string;
  readonly identityFile: string;
  readonly leaseFile: string;
  readonly resource: string;
  readonly resourceUrl: string;
  readonly replicaUrl: string;
}): string[] {
  const rel = (path: string) => relative(options.cwd, path) || path;
  // What node's require() takes: a path that starts with "./" or "../" (or is absolute), else it looks in node_modules.
  const requirable = (path: string) => {
    const r = rel(path);
    return isAbsolute(r) || r.startsWith('../') ? r : `./${r}`;
  };
  const field = (name: string) =>
    `"$(node -p ${shellWord(`require(${JSON.stringify(requirable(options.leaseFile))}).${name}`)})"`;
  // In this repository the command is an npm script (npx would look for the package elsewhere).
  const q = 'npm run -s quorumfence --';
  const r = shellWord(options.resource);
  const put = `curl -fsS -X PUT -H "Authorization: QuorumFence $QUORUMFENCE_TOKEN" --data 42 ${options.resourceUrl}/kv/${encodeURIComponent(options.resource)}/total`;
  return [
    `export QUORUMFENCE_CLUSTER=${shellWord(rel(options.clusterFile))} QUORUMFENCE_IDENTITY=${shellWord(rel(options.identityFile))}`,
    `${q} health`,
    `${q} status ${r}`,
    `${q} acquire ${r} --ttl 30s --json > ${shellWord(rel(options.leaseFile))}`,
    `${q} verify ${field('token')}`,
    `${q} release ${r} ${field('epoch')} --session ${field('session')}`,
    `${q} lock ${r} -- sh -c ${shellWord(put)}`,
    `curl -fsS ${options.resourceUrl}/log`,
    `curl -fsS ${options.resourceUrl}/metrics`,
    `curl -fsS ${options.replicaUrl}/metrics`,
  ];
}
