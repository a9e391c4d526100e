/**
 * `quorumfence lock`, `release`, `health`, `version`, `completion` and the environment variables, as a user
 * runs them: real processes against real replicas. lock runs a real command holding a real lease, the token
 * it saw is checked with the real verifier, and losing the lease is caused by stopping the replicas.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterToJson, withEndpoints } from '../../src/cluster/description.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { checkToken } from '../../src/token/admission-token.js';
import { CLI_PATH, DEV_CLI_PATH, runCli } from '../support/cli.js';
import { lacks, needs } from '../support/system-tools.js';

let dir: string;
let local: LocalCluster;
let clusterFile: string;
let alice: string;
let bob: string;

/** The last stderr line ends with a code in parentheses: an error code, or a refusal reason in capitals. */
const lastLineCode = (stderr: string) => /\(([A-Z_]+)\)$/.exec(stderr.trim().split('\n').at(-1) ?? '')?.[1];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-cli-lock-'));
  dealLocalCluster(join(dir, 'keys'), 4);
  local = await startLocalCluster({ newStores: true, dir: join(dir, 'keys'), dataRoot: join(dir, 'data') });
  clusterFile = join(dir, 'cluster.json');
  writeFileSync(clusterFile, JSON.stringify(clusterToJson(local.cluster)));
  alice = join(dir, 'alice.key');
  bob = join(dir, 'bob.key');
  for (const file of [alice, bob]) expect((await runCli(['identity', 'new', file])).code).toBe(0);
}, 60_000);

afterAll(async () => {
  // Nothing may stay stopped if a test failed half-way.
  await Promise.all(local?.replicas.map((r) => r.kill('SIGCONT')) ?? []);
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

const as = (identity: string) => ['--cluster', clusterFile, '--identity', identity];

describe('quorumfence lock', () => {
  it("runs CMD with the token, epoch and resource in its environment, releases when it exits, and exits with CMD's code", async () => {
    const seen = join(dir, 'seen.json');
    const result = await runCli([
      'lock',
      'lock/exit-7',
      ...as(alice),
      '--',
      'sh',
      '-c',
      `printf '{"token":"%s","epoch":"%s","resource":"%s"}' "$QUORUMFENCE_TOKEN" "$QUORUMFENCE_EPOCH" "$QUORUMFENCE_RESOURCE" > ${seen}; exit 7`,
    ]);
    expect(result.code, result.stderr).toBe(7);
    const env = JSON.parse(readFileSync(seen, 'utf8')) as { token: string; epoch: string; resource: string };
    const check = checkToken(env.token, local.cluster);
    expect(check.ok).toBe(true);
    if (!check.ok) return;
    expect(check.token.grant.resource).toBe('lock/exit-7');
    expect(String(check.token.grant.epoch)).toBe(env.epoch);
    expect(env.resource).toBe('lock/exit-7');
    // Released: another identity takes it at once, without waiting for the ttl.
    const next = await runCli(['acquire', 'lock/exit-7', ...as(bob), '--json']);
    expect(next.code, next.stderr).toBe(0);
    expect((JSON.parse(next.stdout) as { epoch: string }).epoch).toBe(String(BigInt(env.epoch) + 1n));
  });

  it('renews while CMD runs past the ttl; 128 + the signal when a signal ends CMD', async () => {
    const held = await runCli(['lock', 'lock/renewed', ...as(alice), '--ttl', '1s', '--', 'sleep', '2.5']);
    expect(held.code, held.stderr).toBe(0);
    expect(held.stderr).not.toContain('LEASE_LOST');
    const killed = await runCli(['lock', 'lock/signal', ...as(alice), '--', 'sh', '-c', 'kill -TERM $$']);
    expect(killed.code).toBe(128 + 15);
  });

  it('a lost lease: CMD gets SIGTERM, then SIGKILL after --kill-after if it stays; lock exits 124 (LEASE_LOST)', async () => {
    const marker = join(dir, 'term-marker');
    const run = runCli(
      [
        'lock',
        'lock/lost',
        ...as(alice),
        '--ttl',
        '1s',
        '--kill-after',
        '500ms',
        '--',
        'sh',
        '-c',
        // Records SIGTERM and keeps running: only the SIGKILL ends it.
        `trap 'echo TERM > ${marker}' TERM; echo started > ${marker}; while true; do sleep 0.1; done`,
      ],
      { timeoutMs: 60_000 },
    );
    await waitFor(() => readIfExists(marker) === 'started\n', 20_000);
    // Renewal fails with every replica stopped; the lease view runs out within the 1 s ttl.
    await Promise.all(local.replicas.map((r) => r.kill('SIGSTOP')));
    let result;
    try {
      result = await run;
    } finally {
      await Promise.all(local.replicas.map((r) => r.kill('SIGCONT')));
    }
    expect(result.code, result.stderr).toBe(124);
    expect(readIfExists(marker)).toBe('TERM\n');
    // CMD's own stderr may follow ("Terminated" from its shell): lock's line is one of the lines.
    expect(result.stderr).toMatch(/^quorumfence lock: lost the lease on "lock\/lost".*\(LEASE_LOST\)$/m);
  });

  it('lock itself SIGKILLed (or OOM-killed): CMD gets SIGTERM, then SIGKILL after --kill-after; it never runs on with the token (issue 43, item 7)', async () => {
    const marker = join(dir, 'orphan-marker');
    const pidFile = join(dir, 'orphan-pid');
    const lock = spawn(
      process.execPath,
      [
        CLI_PATH,
        'lock',
        'lock/orphan',
        ...as(alice),
        '--kill-after',
        '1s',
        '--',
        'sh',
        '-c',
        // Records SIGTERM and keeps running, as does a child it started: only the SIGKILL ends them.
        `trap 'echo TERM >> ${marker}' TERM; (trap '' TERM; while true; do sleep 0.1; done) & echo $! > ${pidFile}.child; echo $$ > ${pidFile}; echo started > ${marker}; while true; do sleep 0.1; done`,
      ],
      { stdio: 'ignore' },
    );
    try {
      await waitFor(
        () => readIfExists(marker) === 'started\n' && readIfExists(`${pidFile}.child`) !== undefined,
        20_000,
      );
      const command = Number(readIfExists(pidFile));
      const child = Number(readIfExists(`${pidFile}.child`));
      expect(running(command) && running(child)).toBe(true);
      const killedAt = Date.now();
      lock.kill('SIGKILL');
      await waitFor(() => readIfExists(marker) === 'started\nTERM\n', 10_000);
      // Both ignore or survive SIGTERM; the SIGKILL comes --kill-after (1 s) later and ends the whole group.
      await waitFor(() => !running(command) && !running(child), 15_000);
      expect(Date.now() - killedAt).toBeGreaterThanOrEqual(900);
    } finally {
      lock.kill('SIGKILL');
      // Whatever happened above, nothing of CMD's group outlives the test.
      const group = Number(readIfExists(pidFile));
      if (group > 0 && running(group)) process.kill(-group, 'SIGKILL');
    }
  });

  it('no lease: busy is 125 with a BUSY line; a CMD that is not found is 127; --ttl without a unit is refused', async () => {
    const taken = await runCli(['acquire', 'lock/busy', ...as(alice), '--ttl', '30s']);
    expect(taken.code, taken.stderr).toBe(0);
    const marker = join(dir, 'never-ran');
    const busy = await runCli(['lock', 'lock/busy', ...as(bob), '--', 'sh', '-c', `touch ${marker}`]);
    expect(busy.code).toBe(125);
    expect(lastLineCode(busy.stderr)).toBe('BUSY');
    expect(readIfExists(marker)).toBeUndefined();
    // Another identity's lease: "another holder", and only waiting helps.
    expect(busy.stderr).toMatch(
      /busy: held by another holder at epoch \d+ for about \d+s more; wait longer with --wait \d+s \(BUSY\)\n$/,
    );
    // The same identity from another invocation (its own session) is told it is its own lease, and the ways out
    // (issue 47, item 4): release --session, --resume, or wait.
    const own = await runCli(['lock', 'lock/busy', ...as(alice), '--', 'sh', '-c', `touch ${marker}`]);
    expect(own.code).toBe(125);
    expect(readIfExists(marker)).toBeUndefined();
    const alicePublic = (await runCli(['identity', 'show', alice])).stdout.trim();
    const epoch = (
      JSON.parse((await runCli(['status', 'lock/busy', ...as(bob), '--json'])).stdout) as { epoch: string }
    ).epoch;
    expect(own.stderr).toBe(
      `quorumfence lock: busy: this identity (${alicePublic.slice(0, 16)}…) holds "lock/busy" at epoch ${epoch} in another session, for about ${/for about (\d+)s more/.exec(own.stderr)?.[1]}s more: if that process ended, release it with "quorumfence release lock/busy ${epoch} --session SESSION" (the session its acquire printed), take it over with --resume, or wait with ${/or wait with (--wait \d+s)/.exec(own.stderr)?.[1]} (BUSY)\n`,
    );

    const missing = await runCli(['lock', 'lock/missing', ...as(alice), '--', join(dir, 'no-such-command')]);
    expect(missing.code).toBe(127);
    expect(lastLineCode(missing.stderr)).toBe('IO_ERROR');
    const plain = join(dir, 'not-executable');
    writeFileSync(plain, 'echo ran\n', { mode: 0o644 });
    const notExecutable = await runCli(['lock', 'lock/missing', ...as(alice), '--', plain]);
    expect(notExecutable.code).toBe(126);
    expect(notExecutable.stdout).toBe('');
    expect(notExecutable.stderr).toContain('not an executable file (IO_ERROR)');

    for (const verb of ['lock', 'acquire']) {
      const bare = await runCli([
        verb,
        'lock/ttl',
        ...as(alice),
        '--ttl',
        '10',
        ...(verb === 'lock' ? ['--', 'true'] : []),
      ]);
      expect(bare.code, verb).toBe(verb === 'lock' ? 125 : 2);
      expect(bare.stderr).toContain('--ttl expects a duration with a unit');
      expect(lastLineCode(bare.stderr)).toBe('INVALID_OPTION');
    }
    const noCommand = await runCli(['lock', 'lock/none', ...as(alice)]);
    expect(noCommand.code).toBe(125);
    expect(noCommand.stderr).toContain('a command is needed after "--"');
    // lock's --help is its own; after "--" the words are CMD's.
    const help = await runCli(['lock', 'lock/help', ...as(alice), '--', 'sh', '-c', 'echo "$1"', 'sh', '--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toBe('--help\n');
  });
});

describe('quorumfence release', () => {
  it("ends this identity's lease from another invocation naming its session; a wrong epoch, identity or session is NOT_HOLDER", async () => {
    const acquired = await runCli(['acquire', 'release/orders', ...as(alice), '--ttl', '60s', '--json']);
    expect(acquired.code, acquired.stderr).toBe(0);
    const { epoch, session } = JSON.parse(acquired.stdout) as { epoch: string; session: string };
    const held = ['--session', session];

    const wrongIdentity = await runCli(['release', 'release/orders', epoch, ...as(bob), ...held]);
    expect(wrongIdentity.code).toBe(1);
    expect(lastLineCode(wrongIdentity.stderr)).toBe('NOT_HOLDER');
    const wrongEpoch = await runCli(['release', 'release/orders', String(BigInt(epoch) + 5n), ...as(alice), ...held]);
    expect(wrongEpoch.code).toBe(1);
    expect(lastLineCode(wrongEpoch.stderr)).toBe('NOT_HOLDER');
    // Another session of the same identity (a second process with the same key file) cannot end the lease.
    const otherSession = await runCli(['release', 'release/orders', epoch, ...as(alice)]);
    expect(otherSession.code).toBe(1);
    expect(lastLineCode(otherSession.stderr)).toBe('NOT_HOLDER');

    const released = await runCli(['release', 'release/orders', epoch, ...as(alice), ...held, '--json']);
    expect(released.code, released.stderr).toBe(0);
    expect(JSON.parse(released.stdout)).toMatchObject({ ok: true, resource: 'release/orders', epoch });
    const next = await runCli(['acquire', 'release/orders', ...as(bob)]);
    expect(next.code, next.stderr).toBe(0);

    const badEpoch = await runCli(['release', 'release/orders', '0', ...as(alice)]);
    expect(badEpoch.code).toBe(2);
    expect(lastLineCode(badEpoch.stderr)).toBe('INVALID_OPTION');
  });
});

describe('quorumfence verify, asking the replicas', () => {
  it('says whether a valid token is current, ended or superseded; without an identity or with --offline it says it cannot tell (issue 47, item 9)', async () => {
    const acquired = await runCli(['acquire', 'verify/current', ...as(alice), '--ttl', '30s', '--json']);
    expect(acquired.code, acquired.stderr).toBe(0);
    const { token, epoch, session } = JSON.parse(acquired.stdout) as { token: string; epoch: string; session: string };
    const verify = async (...flags: string[]) => {
      const result = await runCli(['verify', token, '--cluster', clusterFile, ...flags, '--json']);
      expect(result.code, result.stderr).toBe(0);
      return JSON.parse(result.stdout) as { valid: boolean; current: Record<string, unknown> };
    };
    const held = await verify('--identity', bob);
    expect(held.valid).toBe(true);
    expect(held.current).toMatchObject({ state: 'current' });
    expect(held.current.remainingMs).toBeGreaterThan(20_000);
    const text = await runCli(['verify', token, '--cluster', clusterFile], { env: { QUORUMFENCE_IDENTITY: bob } });
    expect(text.stdout).toMatch(/\n {2}current {3}yes: its lease runs \(about \d+s more\)\n$/);

    expect((await verify('--offline')).current).toEqual({ state: 'unknown', reason: 'not asked (--offline)' });
    const anonymous = await runCli(['verify', token, '--cluster', clusterFile], { env: { QUORUMFENCE_IDENTITY: '' } });
    expect(anonymous.code).toBe(0);
    expect(anonymous.stdout).toMatch(
      /\n {2}current {3}cannot tell: no identity to ask the replicas with \(give --identity FILE or set \$QUORUMFENCE_IDENTITY\)\n$/,
    );

    const released = await runCli(['release', 'verify/current', epoch, ...as(alice), '--session', session]);
    expect(released.code, released.stderr).toBe(0);
    expect((await verify('--identity', bob)).current).toEqual({ state: 'ended' });

    const next = await runCli(['acquire', 'verify/current', ...as(bob), '--json']);
    expect(next.code, next.stderr).toBe(0);
    const nextEpoch = (JSON.parse(next.stdout) as { epoch: string }).epoch;
    expect((await verify('--identity', bob)).current).toEqual({ state: 'superseded', epoch: nextEpoch });

    // With the replicas stopped it cannot tell, and says why; the token is still valid (exit 0).
    await Promise.all(local.replicas.map((r) => r.kill('SIGSTOP')));
    try {
      const blind = await verify('--identity', bob, '--timeout', '500ms');
      expect(blind.valid).toBe(true);
      expect(blind.current).toMatchObject({ state: 'unknown', reason: expect.stringMatching(/replicas answered/) });
    } finally {
      await Promise.all(local.replicas.map((r) => r.kill('SIGCONT')));
    }
  });
});

describe('QUORUMFENCE_CLUSTER and QUORUMFENCE_IDENTITY', () => {
  it('stand in for --cluster and --identity; a flag wins over its variable', async () => {
    const env = { QUORUMFENCE_CLUSTER: clusterFile, QUORUMFENCE_IDENTITY: alice };
    const fromEnv = await runCli(['acquire', 'env/orders', '--json'], { env });
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
    const { holder } = JSON.parse(fromEnv.stdout) as { holder: string };
    const alicePublic = (await runCli(['identity', 'show', alice])).stdout.trim();
    expect(holder).toBe(alicePublic);

    const stale = { QUORUMFENCE_CLUSTER: join(dir, 'missing.json'), QUORUMFENCE_IDENTITY: alice };
    const flagsWin = await runCli(['acquire', 'env/other', ...as(bob), '--json'], { env: stale });
    expect(flagsWin.code, flagsWin.stderr).toBe(0);
    const bobPublic = (await runCli(['identity', 'show', bob])).stdout.trim();
    expect((JSON.parse(flagsWin.stdout) as { holder: string }).holder).toBe(bobPublic);
    const variableRead = await runCli(['acquire', 'env/other', '--identity', bob], { env: stale });
    expect(variableRead.code).toBe(1);
    expect(variableRead.stderr).toContain('missing.json');

    const neither = await runCli(['status', 'env/orders'], {
      env: { QUORUMFENCE_CLUSTER: '', QUORUMFENCE_IDENTITY: '' },
    });
    expect(neither.code).toBe(2);
    expect(neither.stderr).toContain('--cluster is required (or set $QUORUMFENCE_CLUSTER)');
  });

  it('a flag given empty is an error, never a fall-back to its variable (issue 43, item 8)', async () => {
    const env = { QUORUMFENCE_CLUSTER: clusterFile, QUORUMFENCE_IDENTITY: alice };
    for (const flags of [['--identity', ''], ['--cluster', ''], ['--cluster=']]) {
      const empty = await runCli(['acquire', 'env/empty', ...flags, '--json'], { env });
      expect(empty.code, flags.join(' ')).toBe(2);
      expect(empty.stdout).toBe('');
      expect(empty.stderr).toMatch(/was given an empty value/);
      expect(lastLineCode(empty.stderr)).toBe('INVALID_OPTION');
    }
    // Nothing was acquired by those: another identity takes the resource at once.
    const next = await runCli(['acquire', 'env/empty', ...as(bob), '--json']);
    expect(next.code, next.stderr).toBe(0);
    const lock = await runCli(['lock', 'env/empty-lock', '--identity', '', '--', 'true'], { env });
    expect(lock.code).toBe(125);
    expect(lastLineCode(lock.stderr)).toBe('INVALID_OPTION');
  });
});

describe('quorumfence health and version', () => {
  it('a table and JSON of every replica, margin 1 with all four up; exit 1 once the margin is below 0', async () => {
    const table = await runCli(['health', '--cluster', clusterFile]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain('4 of 4 replicas healthy, 3 needed: margin 1');
    expect(table.stdout.trim().split('\n')).toHaveLength(6);
    const json = await runCli(['health', '--json'], { env: { QUORUMFENCE_CLUSTER: clusterFile } });
    const report = JSON.parse(json.stdout) as {
      margin: number;
      replicas: { replica: number; reachable: boolean; healthy: boolean; version: string }[];
    };
    expect(report.margin).toBe(1);
    expect(report.replicas.map((r) => [r.replica, r.reachable, r.healthy])).toEqual([
      [1, true, true],
      [2, true, true],
      [3, true, true],
      [4, true, true],
    ]);
    const version = JSON.parse((await runCli(['version', '--json'])).stdout) as Record<string, string>;
    expect(report.replicas[0]!.version).toBe(version.quorumfence);

    await Promise.all([local.replica(3).kill('SIGSTOP'), local.replica(4).kill('SIGSTOP')]);
    try {
      const down = await runCli(['health', '--cluster', clusterFile, '--timeout', '500ms', '--json']);
      expect(down.code).toBe(1);
      const downReport = JSON.parse(down.stdout) as typeof report;
      expect(downReport.margin).toBe(-1);
      expect(downReport.replicas.filter((r) => !r.reachable).map((r) => r.replica)).toEqual([3, 4]);
    } finally {
      await Promise.all([local.replica(3).kill('SIGCONT'), local.replica(4).kill('SIGCONT')]);
    }
  });

  it('version prints the package version, node and the backend; --version is the same', async () => {
    const text = await runCli(['version']);
    expect(text.code).toBe(0);
    const dashed = await runCli(['--version']);
    expect(dashed).toEqual(text);
    const dev = await runCli(['--version'], { program: DEV_CLI_PATH });
    expect(dev.code).toBe(0);
    expect(dev.stdout).toMatch(/^quorumfence-dev \d+\.\d+\.\d+\n$/);
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(text.stdout).toMatch(new RegExp(`^quorumfence ${pkg.version.replace(/\./g, '\\.')}\\n`));
    const json = JSON.parse((await runCli(['version', '--json'])).stdout) as Record<string, string>;
    expect(json).toMatchObject({ quorumfence: pkg.version, node: process.versions.node });
    expect(['blst', 'noble']).toContain(json.backend);
    const forced = JSON.parse(
      (await runCli(['version', '--json'], { env: { QUORUMFENCE_BLS_BACKEND: 'noble' } })).stdout,
    );
    expect(forced.backend).toBe('noble');
  });
});

describe('one-line errors', () => {
  it('status names an unreachable replica once; an unknown command ends with its code', async () => {
    const halfDead = join(dir, 'half-dead.json');
    const endpoints = local.cluster.replicas.map((r, k) => (k === 3 ? 'ws://127.0.0.1:9' : r.endpoint));
    writeFileSync(halfDead, JSON.stringify(clusterToJson(withEndpoints(local.cluster, endpoints))));
    const status = await runCli(['status', 'errors/x', '--cluster', halfDead, '--identity', alice]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/unreachable: /);
    expect(status.stdout).not.toMatch(/unreachable: unreachable/);

    const unknown = await runCli(['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(lastLineCode(unknown.stderr)).toBe('INVALID_OPTION');
    const badFlag = await runCli(['verify', 'x', '--cluster', clusterFile, '--nope']);
    expect(badFlag.code).toBe(2);
    expect(lastLineCode(badFlag.stderr)).toBe('INVALID_OPTION');
  });
});

describe('quorumfence completion', () => {
  /** What bash completes for `words`, the last being the word under the cursor, with the script sourced. */
  function complete(script: string, words: string[]): string[] {
    const file = join(dir, 'completion.bash');
    writeFileSync(file, script);
    const quoted = words.map((w) => `'${w.replace(/'/g, `'\\''`)}'`).join(' ');
    const run = spawnSync(
      'bash',
      [
        '--norc',
        '--noprofile',
        '-c',
        `source ${file}; COMP_WORDS=(${quoted}); COMP_CWORD=${words.length - 1}; _quorumfence; printf '%s\\n' "\${COMPREPLY[@]}"`,
      ],
      { encoding: 'utf8', timeout: 10_000 },
    );
    expect(run.status, run.stderr).toBe(0);
    return run.stdout.split('\n').filter(Boolean);
  }

  it('bash: sourced, it completes verbs, subcommands and flags from the command table, and commands after "--"', async () => {
    const script = await runCli(['completion', 'bash']);
    expect(script.code).toBe(0);
    expect(complete(script.stdout, ['quorumfence', 'lo'])).toEqual(['lock']);
    expect(complete(script.stdout, ['quorumfence', 're'])).toEqual(['replica', 'resource', 'release', 'reshare']);
    expect(complete(script.stdout, ['quorumfence', 'replica', 'ex'])).toEqual(['export']);
    expect(complete(script.stdout, ['quorumfence', 'lock', 'r', '--ki'])).toEqual(['--kill-after']);
    expect(complete(script.stdout, ['quorumfence', 'health', '--'])).toEqual([
      '--cluster',
      '--help',
      '--json',
      '--timeout',
      '--wait',
    ]);
    expect(complete(script.stdout, ['quorumfence', 'lock', 'r', '--', 'bas'])).toContain('bash');
    expect(complete(script.stdout, ['quorumfence', 'lock', 'r', '--', 'sh', '--ki'])).toEqual([]);
  });

  it('zsh: a compdef script naming every verb; an unknown shell is INVALID_OPTION', async () => {
    const script = await runCli(['completion', 'zsh']);
    expect(script.code).toBe(0);
    expect(script.stdout).toMatch(/^#compdef quorumfence\n/);
    for (const verb of ['keygen', 'lock', 'release', 'health', 'version', 'completion'])
      expect(script.stdout).toMatch(new RegExp(`^    '${verb}:`, 'm'));
    const tcsh = await runCli(['completion', 'tcsh']);
    expect(tcsh.code).toBe(2);
    expect(tcsh.stderr).toContain('unknown shell "tcsh" (bash, zsh, fish)');
    expect(lastLineCode(tcsh.stderr)).toBe('INVALID_OPTION');
  });

  it.skipIf(lacks('fish'))(
    `fish ${needs('fish')}: sourced, it completes verbs, subcommands, flags and commands after "--"`,
    async () => {
      const script = await runCli(['completion', 'fish']);
      expect(script.code, script.stderr).toBe(0);
      const file = join(dir, 'completion.fish');
      writeFileSync(file, script.stdout);
      /** What fish completes for the command line `line` (the cursor at its end): the words, without descriptions. */
      const complete = (line: string) => {
        const run = spawnSync('fish', ['--no-config', '-c', `source ${file}; complete -C ${JSON.stringify(line)}`], {
          encoding: 'utf8',
          timeout: 10_000,
        });
        expect(run.status, run.stderr).toBe(0);
        return run.stdout
          .split('\n')
          .filter(Boolean)
          .map((entry) => entry.split('\t')[0]!);
      };
      expect(complete('quorumfence lo')).toEqual(['lock']);
      expect(complete('quorumfence re').sort()).toEqual(['release', 'replica', 'reshare', 'resource']);
      expect(complete('quorumfence replica ex')).toEqual(['export']);
      expect(complete('quorumfence lock r --ki')).toEqual(['--kill-after']);
      expect(complete('quorumfence health --')).toEqual(['--cluster', '--help', '--json', '--timeout', '--wait']);
      expect(complete('quorumfence lock r -- bas')).toContain('bash');
      expect(complete('quorumfence lock r -- sh --ki')).not.toContain('--kill-after');
    },
  );
});

/** The process exists and has not ended (a zombie waiting for its parent to reap it has ended). Linux's /proc. */
function running(pid: number): boolean {
  const stat = readIfExists(`/proc/${pid}/stat`);
  return stat !== undefined && !/^\d+ \(.*\) Z/s.test(stat);
}

function readIfExists(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
