/**
 * bench --gray's slow-flush: a replica whose disk flushes slowly, made from
 * outside the process. A small shared library, preloaded into that one
 * replica (LD_PRELOAD), wraps the C library's flush calls (fsync, fdatasync,
 * and msync with MS_SYNC: what LMDB calls to make a commit durable) and
 * waits before each as many milliseconds as a control file says (read at
 * every flush, so the bench turns it on and off while the replica runs). The
 * replica's code, its LMDB and its flush barrier are the real ones: a grant
 * waits for a flush that takes longer, and grants that arrive meanwhile wait
 * for the next one, as on a slow disk.
 *
 * The library is compiled on the machine that runs the bench, by its C
 * compiler (cc; Debian: gcc), into the run's own temporary directory; without
 * a compiler the fault is skipped and says so. Linux with glibc only, as the
 * rest of the bench's /proc readings.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';

/** The environment variable naming the control file (the library reads it at load). */
export const SLOW_FLUSH_FILE_ENV = 'QUORUMFENCE_SLOW_FLUSH_FILE';

/** The most a flush is slowed: a control file's larger value counts as none (a typo must not hang a replica). */
export const MAX_SLOW_FLUSH_MS = 60_000;

const SOURCE = `/* quorumfence bench --gray slow-flush: every flush of this process waits first
   for the milliseconds in the file named by ${SLOW_FLUSH_FILE_ENV}
   (read at each flush; 0, a missing file or a value above ${MAX_SLOW_FLUSH_MS}: no wait). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int control_fd = -1;

__attribute__((constructor)) static void open_control(void) {
  const char *path = getenv("${SLOW_FLUSH_FILE_ENV}");
  if (path) control_fd = open(path, O_RDONLY | O_CLOEXEC);
}

static void wait_before_flush(void) {
  if (control_fd < 0) return;
  int saved = errno;
  char text[24];
  ssize_t n = pread(control_fd, text, sizeof text - 1, 0);
  if (n > 0) {
    text[n] = 0;
    long ms = strtol(text, NULL, 10);
    if (ms > 0 && ms <= ${MAX_SLOW_FLUSH_MS}) {
      struct timespec left = { ms / 1000, (ms % 1000) * 1000000L };
      while (nanosleep(&left, &left) == -1 && errno == EINTR) {
      }
    }
  }
  errno = saved;
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  wait_before_flush();
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  wait_before_flush();
  return real(fd);
}

int msync(void *address, size_t length, int flags) {
  static int (*real)(void *, size_t, int);
  if (!real) real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
  if (flags & MS_SYNC) wait_before_flush();
  return real(address, length, flags);
}
`;

/** The C compiler on PATH, or undefined. */
export function findCompiler(): string | undefined {
  const found = spawnSync('sh', ['-c', 'command -v cc || command -v gcc'], { encoding: 'utf8' });
  const path = found.stdout.trim().split('\n')[0];
  return found.status === 0 && path ? path : undefined;
}

/** The compiled library and its control file, and the environment that preloads it into a process. */
export interface SlowFlush {
  readonly library: string;
  readonly controlFile: string;
  readonly env: NodeJS.ProcessEnv;
  /** Every flush from now on waits `ms` first (0: none). */
  set(ms: number): void;
}

/**
 * Compiles the library into `dir` and writes its control file (0: no wait yet).
 * @throws QuorumFenceError IO_ERROR when there is no C compiler or it fails
 */
export function buildSlowFlush(dir: string): SlowFlush {
  const compiler = findCompiler();
  if (!compiler) throw new QuorumFenceError('IO_ERROR', 'no C compiler on PATH (Debian: apt-get install gcc)');
  const source = join(dir, 'slow-flush.c');
  const library = join(dir, 'slow-flush.so');
  const controlFile = join(dir, 'slow-flush-ms');
  writeFileSync(source, SOURCE);
  const built = spawnSync(compiler, ['-shared', '-fPIC', '-O2', '-Wall', '-o', library, source, '-ldl'], {
    encoding: 'utf8',
  });
  if (built.status !== 0)
    throw new QuorumFenceError(
      'IO_ERROR',
      `${compiler} could not build the slow-flush library: ${built.stderr.trim()}`,
    );
  const set = (ms: number) => {
    if (!Number.isInteger(ms) || ms < 0 || ms > MAX_SLOW_FLUSH_MS)
      throw new QuorumFenceError('INVALID_ARGUMENT', `a slow flush is 0..${MAX_SLOW_FLUSH_MS} ms, got ${ms}`);
    // In place, at a fixed width: the library holds the file open and may read it at any moment (a truncation
    // would let it read nothing; a new file by rename would never be seen).
    writeFileSync(controlFile, `${ms}`.padEnd(15) + '\n', { flag: 'r+' });
  };
  writeFileSync(controlFile, '0'.padEnd(15) + '\n');
  return { library, controlFile, env: { LD_PRELOAD: library, [SLOW_FLUSH_FILE_ENV]: controlFile }, set };
}
