/**
 * The operator command's decisions, pure: durations need a unit, lock's exit codes, where a replica without
 * --listen binds, how `health` judges a replica's answer, what `completion` reads from a verb's help, and
 * `status` naming a state once.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  parseDuration,
  parseFlags,
  requiredOrEnvironment,
  resourceArgument,
  type Command,
} from '../../src/command/args.js';
import { chooseEndpointListen, endpointPort } from '../../src/command/endpoint-listen.js';
import { completionOf, verbCompletions } from '../../src/cli/completion.js';
import { formatHealthReport, formatUptime, healthReport, judgeReplica } from '../../src/cli/health.js';
import { LOCK_EXIT_CODES, lockExitCode, splitCommandLine } from '../../src/cli/lock.js';
import { leaseOwner } from '../../src/cli/client-flags.js';
import { currencyLine, tokenCurrency } from '../../src/cli/verify.js';
import { parseEpochArgument } from '../../src/cli/release.js';
import { codeOf } from '../support/error-code.js';
import { dealCluster } from '../support/dealt-cluster.js';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));
const sourceFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(join(dir, entry.name))
      : entry.name.endsWith('.ts')
        ? [join(dir, entry.name)]
        : [],
  );

describe('durations', () => {
  it('a number without a unit is refused (INVALID_OPTION), whatever the number; "0" alone needs none', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 10_000_000 }), fc.boolean(), (n, decimal) => {
        const text = decimal ? `${n}.5` : String(n);
        expect(codeOf(() => parseDuration(text, 'ttl', 1))).toBe('INVALID_OPTION');
      }),
    );
    expect(parseDuration('0', 'wait', 5)).toBe(0);
  });

  it('a number with a unit is that many of the unit', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 100_000 }),
        fc.constantFrom(['ms', 1], ['s', 1000], ['m', 60_000], ['h', 3_600_000]),
        (n, [unit, ms]) => {
          expect(parseDuration(`${n}${unit}`, 'ttl', 1)).toBe(n * (ms as number));
        },
      ),
    );
    expect(parseDuration('1.5s', 'ttl', 1)).toBe(1500);
    expect(parseDuration(undefined, 'ttl', 42)).toBe(42);
  });

  it('no flag of any verb is a bare count of milliseconds or seconds: every duration takes its unit (issue 47, item 9)', async () => {
    const { VERBS } = await import('../../src/cli/main.js');
    // The development tools' table is private to src/devtools/main.ts: the same verbs, loaded the same way.
    const DEV_VERBS: Record<string, () => Promise<{ command: Command }>> = {
      demo: () => import('../../src/devtools/demo.js'),
      chaos: () => import('../../src/devtools/chaos.js'),
      simulate: () => import('../../src/devtools/simulate.js'),
      bench: () => import('../../src/devtools/bench.js'),
      worker: () => import('../../src/devtools/worker.js'),
      vectors: () => import('../../src/devtools/vectors.js'),
    };
    for (const [program, verbs] of [
      ['quorumfence', VERBS],
      ['quorumfence-dev', DEV_VERBS],
    ] as const)
      for (const completion of await verbCompletions(program, verbs))
        expect(
          completion.flags.filter((flag) => /-(ms|millis|milliseconds|s|secs|seconds)$/.test(flag)),
          `${program} ${completion.verb}`,
        ).toEqual([]);
  }, 30_000);

  it('the refusal says a unit is needed and suggests one', () => {
    expect(() => parseDuration('10', 'ttl', 1)).toThrow(/--ttl expects a duration with a unit.*10ms or 10s/);
    for (const bad of ['', 's', '10 s', '10sec', '-1s', '1e3ms', 'ten'])
      expect(
        codeOf(() => parseDuration(bad, 'ttl', 1)),
        bad,
      ).toBe('INVALID_OPTION');
  });
});

describe('flags from the environment', () => {
  it('the flag wins over the variable; the variable stands in for a missing flag; neither is INVALID_OPTION', () => {
    const env = { QUORUMFENCE_CLUSTER: 'from-env.json' };
    expect(requiredOrEnvironment('flag.json', 'cluster', 'QUORUMFENCE_CLUSTER', env)).toBe('flag.json');
    expect(requiredOrEnvironment(undefined, 'cluster', 'QUORUMFENCE_CLUSTER', env)).toBe('from-env.json');
    expect(codeOf(() => requiredOrEnvironment(undefined, 'cluster', 'QUORUMFENCE_CLUSTER', {}))).toBe('INVALID_OPTION');
    // A variable set to "" counts as unset (a flag given empty never gets here: parseFlags refuses it).
    expect(() =>
      requiredOrEnvironment(undefined, 'cluster', 'QUORUMFENCE_CLUSTER', { QUORUMFENCE_CLUSTER: '' }),
    ).toThrow('--cluster is required (or set $QUORUMFENCE_CLUSTER)');
  });

  it('a flag given empty is INVALID_OPTION for every flag, never read as absent (issue 43, item 8)', () => {
    const options = {
      identity: { type: 'string' },
      watch: { type: 'string', multiple: true },
      json: { type: 'boolean' },
    } as const;
    for (const argv of [
      ['--identity', ''],
      ['--identity='],
      ['--watch', 'a', '--watch', ''],
      ['--json', '--identity', ''],
    ])
      expect(() => parseFlags(argv, options), argv.join(' ')).toThrow(
        expect.objectContaining({
          code: 'INVALID_OPTION',
          message: expect.stringMatching(/^--(identity|watch) was given an empty value/),
        }),
      );
    expect(parseFlags(['--identity', 'me.key', '--watch', 'a', '--json'], options).values).toEqual({
      identity: 'me.key',
      watch: ['a'],
      json: true,
    });
  });

  it('every verb reads its flags through parseFlags, where that rule lives (no other parseArgs in src/)', () => {
    const offenders = sourceFiles(SRC)
      .filter(
        (file) => !file.endsWith(join('command', 'args.ts')) && !file.endsWith(join('testing', 'holder-child.ts')),
      )
      .filter((file) => /\bparseArgs\b/.test(readFileSync(file, 'utf8')));
    expect(offenders).toEqual([]);
  });
});

describe('resource names on the command line', () => {
  const utf8 = (text: string) => new TextEncoder().encode(text);

  it('a U+FFFD that stands for bytes that were not UTF-8 is RESOURCE_NOT_UTF8, never a name (issue 47, item 9)', () => {
    const invalid = Uint8Array.of(...utf8('orders/'), 0xff);
    expect(codeOf(() => resourceArgument('orders/\uFFFD', 'RESOURCE', [utf8('acquire'), invalid]))).toBe(
      'RESOURCE_NOT_UTF8',
    );
    // Where the bytes cannot be read, a U+FFFD cannot be told apart: refused too, saying so.
    expect(() => resourceArgument('orders/\uFFFD', 'RESOURCE', null)).toThrow(/this system cannot tell which/);
    // The character itself, typed in UTF-8 (EF BF BD), is a name like any other.
    expect(resourceArgument('orders/\uFFFD', 'RESOURCE', [utf8('orders/\uFFFD')])).toBe('orders/\uFFFD');
    expect(resourceArgument('orders/42', 'RESOURCE', null)).toBe('orders/42');
  });

  it('the name contract is checked before anything connects', () => {
    expect(codeOf(() => resourceArgument('a\tb', 'RESOURCE', []))).toBe('NAME_CONTROL_CHARACTER');
    expect(codeOf(() => resourceArgument('r'.repeat(257), 'RESOURCE', []))).toBe('RESOURCE_TOO_LONG');
  });
});

describe('whose busy lease, and whether a token is current: the (f+1) rules', () => {
  const { cluster } = dealCluster(4, loadBackend('noble'));
  const me = 'aa'.repeat(32);
  const someone = new Uint8Array(32).fill(0xbb);
  const listing = (replica: number, holder: Uint8Array, epoch = 7n) => ({
    replica,
    endpoint: `ws://127.0.0.1:${7100 + replica}`,
    state: 'ok' as const,
    leases: [{ resource: 'r', epoch, holder, remainingMs: 1000 }],
    more: false,
  });
  const mine = new Uint8Array(32).fill(0xaa);

  it("a busy lease is this identity's only when f+1 replicas list it so, another's only when f+1 list another holder", () => {
    expect(leaseOwner([listing(1, mine), listing(2, mine)], 'r', 7n, me, 1)).toBe('mine');
    // One replica (possibly the liar) is not enough either way.
    expect(leaseOwner([listing(1, mine), listing(2, someone)], 'r', 7n, me, 1)).toBe('unknown');
    expect(leaseOwner([listing(1, someone), listing(2, someone), listing(3, mine)], 'r', 7n, me, 1)).toBe('other');
    // Another epoch or resource is not this lease.
    expect(leaseOwner([listing(1, mine, 6n), listing(2, mine, 6n)], 'r', 7n, me, 1)).toBe('unknown');
    expect(leaseOwner([], 'r', 7n, me, 1)).toBe('unknown');
  });

  it('a token is current while f+1 say its lease runs, ended at the same epoch, superseded below a later one', () => {
    const status = (epoch: bigint | undefined, leased: boolean) => ({
      resource: 'r',
      replicas: [],
      epoch,
      leased,
      remainingMs: leased ? 4200 : undefined,
      answered: epoch === undefined ? 2 : 3,
    });
    expect(tokenCurrency(7n, status(7n, true), cluster)).toEqual({ state: 'current', remainingMs: 4200 });
    expect(tokenCurrency(7n, status(7n, false), cluster)).toEqual({ state: 'ended' });
    expect(tokenCurrency(7n, status(9n, false), cluster)).toEqual({ state: 'superseded', epoch: 9n });
    expect(tokenCurrency(7n, status(undefined, false), cluster)).toEqual({
      state: 'unknown',
      reason: '2 of the 4 replicas answered, 3 are needed',
    });
    expect(tokenCurrency(7n, status(5n, false), cluster)).toMatchObject({ state: 'unknown' });
    expect(currencyLine({ state: 'superseded', epoch: 9n })).toMatch(/^no: superseded, the replicas are at epoch 9/);
  });
});

describe('lock', () => {
  it("exits with CMD's code, 128 + a signal's number, or its own codes for a lost lease and a CMD that did not start", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 255 }), (code) => {
        expect(lockExitCode({ kind: 'exited', code, signal: null, lost: false })).toBe(code);
        expect(lockExitCode({ kind: 'exited', code, signal: null, lost: true })).toBe(LOCK_EXIT_CODES.lost);
      }),
    );
    expect(lockExitCode({ kind: 'exited', code: null, signal: 'SIGTERM', lost: false })).toBe(128 + 15);
    expect(lockExitCode({ kind: 'exited', code: null, signal: 'SIGKILL', lost: false })).toBe(128 + 9);
    expect(lockExitCode({ kind: 'exited', code: null, signal: 'SIGKILL', lost: true })).toBe(124);
    expect(lockExitCode({ kind: 'lost_before_start' })).toBe(124);
    expect(lockExitCode({ kind: 'not_started', errorCode: 'ENOENT', message: '' })).toBe(127);
    expect(lockExitCode({ kind: 'not_started', errorCode: 'EACCES', message: '' })).toBe(126);
    expect(new Set(Object.values(LOCK_EXIT_CODES)).size).toBe(4);
  });

  it('splits its own words from the command at the first "--"; no command is INVALID_OPTION', () => {
    expect(splitCommandLine(['r', '--ttl', '1s', '--', 'sh', '-c', 'x -- y'])).toEqual({
      own: ['r', '--ttl', '1s'],
      file: 'sh',
      args: ['-c', 'x -- y'],
    });
    for (const argv of [['r'], ['r', '--'], ['r', '--', '']])
      expect(
        codeOf(() => splitCommandLine(argv)),
        argv.join(' '),
      ).toBe('INVALID_OPTION');
  });
});

describe('release', () => {
  it('EPOCH is a decimal integer in 1 .. 2^63-1', () => {
    expect(parseEpochArgument('1')).toBe(1n);
    expect(parseEpochArgument('9223372036854775807')).toBe(2n ** 63n - 1n);
    for (const bad of ['0', '-1', '01', '1.0', 'x', '9223372036854775808', '', '1e3'])
      expect(
        codeOf(() => parseEpochArgument(bad)),
        bad,
      ).toBe('INVALID_OPTION');
  });
});

describe('a replica without --listen', () => {
  const local = new Set(['10.1.2.3', 'fe80::1']);

  it("binds the endpoint's own host when it is an address of this machine, with the endpoint's port", () => {
    expect(chooseEndpointListen('ws://127.0.0.1:7101', ['127.0.0.1'], local)).toEqual({
      host: '127.0.0.1',
      port: 7101,
    });
    // All of 127/8 is loopback (the compose test gives each service its own).
    expect(chooseEndpointListen('ws://replica-1:7001', ['127.0.3.4'], local)).toEqual({
      host: '127.0.3.4',
      port: 7001,
    });
    expect(chooseEndpointListen('ws://replica-1:7001', ['192.0.2.1', '10.1.2.3'], local)).toEqual({
      host: '10.1.2.3',
      port: 7001,
    });
    expect(chooseEndpointListen('wss://[::1]', ['::1'], local)).toEqual({ host: '::1', port: 443 });
    expect(endpointPort(new URL('ws://h'))).toBe(80);
  });

  it('refuses an endpoint that is not an address of this machine (INVALID_OPTION), suggesting --listen', () => {
    expect(codeOf(() => chooseEndpointListen('ws://replica-1.example:7001', ['192.0.2.1'], local))).toBe(
      'INVALID_OPTION',
    );
    expect(() => chooseEndpointListen('ws://nowhere.invalid:7001', [], local)).toThrow(
      /resolves to no address.*--listen 0\.0\.0\.0:7001/,
    );
  });
});

describe('health', () => {
  const { cluster } = dealCluster(4, loadBackend('noble'));
  const answer = (body: Record<string, unknown>) => ({
    ok: true as const,
    body: JSON.stringify({ status: 'ok', clusterId: cluster.idHex, version: '0.1.0', uptimeSeconds: 75, ...body }),
  });

  it('a replica is healthy only when it answers ok, for this cluster and its own index, and is not frozen', () => {
    expect(judgeReplica(cluster, 2, answer({ replica: 2 }))).toMatchObject({
      reachable: true,
      healthy: true,
      version: '0.1.0',
      uptimeSeconds: 75,
      problem: null,
    });
    const unhealthy = {
      'another index': answer({ replica: 3 }),
      'another cluster': answer({ replica: 2, clusterId: 'ab'.repeat(32) }),
      frozen: answer({ replica: 2, frozen: true }),
      stopping: answer({ replica: 2, status: 'stopping' }),
    };
    for (const [what, body] of Object.entries(unhealthy))
      expect(judgeReplica(cluster, 2, body), what).toMatchObject({ reachable: true, healthy: false });
    expect(judgeReplica(cluster, 2, { ok: true, body: '<html>' })).toMatchObject({ reachable: false, healthy: false });
    expect(judgeReplica(cluster, 2, { ok: false, message: 'connect ECONNREFUSED' })).toMatchObject({
      reachable: false,
      healthy: false,
      problem: 'connect ECONNREFUSED',
    });
  });

  it('the margin is healthy replicas minus 2f+1, and the table says so', () => {
    const judged = [1, 2, 3, 4].map((i) =>
      judgeReplica(cluster, i, i <= 2 ? answer({ replica: i }) : { ok: false, message: 'down' }),
    );
    const report = healthReport(cluster, judged);
    expect(report).toMatchObject({ healthy: 2, t: 3, margin: -1 });
    expect(formatHealthReport(report)).toMatch(
      /2 of 4 replicas healthy, 3 needed: margin -1 \(acquires cannot succeed\)/,
    );
    expect(healthReport(cluster, judged.slice(0, 2).concat(judged.slice(0, 2))).margin).toBe(1);
    expect([formatUptime(null), formatUptime(45), formatUptime(75), formatUptime(7260), formatUptime(90_000)]).toEqual([
      '-',
      '45s',
      '1m 15s',
      '2h 1m',
      '1d 1h',
    ]);
  });
});

describe('completion', () => {
  it("reads subcommands from the verb's usage lines and flags from its synopsis and option lines, not its prose", () => {
    const completion = completionOf('quorumfence', 'thing', {
      summary: 'a verb',
      usage: `usage: quorumfence thing [run] --data DIR [--fast]
       quorumfence thing export|import --in FILE
       quorumfence other --elsewhere

Prose that mentions --not-a-flag and "quorumfence thing RESOURCE".

options:
  --data DIR     where
  --in FILE      what
  --json         print JSON
`,
    });
    expect(completion.subcommands).toEqual(['export', 'import', 'run']);
    expect(completion.flags).toEqual(['--data', '--fast', '--help', '--in', '--json']);
  });
});
