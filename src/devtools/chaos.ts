/**
 * `quorumfence-dev chaos`: a time-bounded soak of a local deployment under a
 * seeded mix of faults and Byzantine behaviours, judged by the history
 * checker afterwards (src/testing/chaos.ts).
 */
import { randomInt } from 'node:crypto';
import { QuorumFenceError } from '../common/errors.js';
import { integerFlag, parseDuration, parseFlags, type Command } from '../command/args.js';

/** Three minutes: long enough for dozens of faults of every kind, short enough to run before a merge. */
const DEFAULT_DURATION_MS = 3 * 60_000;

const usage = `usage: quorumfence-dev chaos [--duration 3m] [--seed N] [--replicas 4|7] [--workers N] [--reshare] [--json]

Starts a local cluster (the last f replicas Byzantine) and the reference
resource, runs read-modify-write increments through the guard from several
clients and a holder process, and meanwhile injects a seeded mix of faults:
partitions (one replica, a minority, a ring of majorities), noisy links,
SIGKILL and restart, SIGSTOP/SIGCONT of replicas and of the holder, clock
jumps, changing Byzantine behaviours, replayed and tampered tokens, huge
epochs. Stops by itself after --duration, then checks the whole history
(accepted epochs never go down, one token per (resource, epoch), every
accepted token verifies, no acknowledged write lost, every counter equals its
accepted writes) and prints a table. A counter whose final value could not be
read is listed as "could not read" with the reason, never as a value. Build
first (it runs dist/).

With --reshare, one replica (seeded; Byzantine or not) is replaced at a seeded
point between 30% and 50% of the run, while the workers and the holder keep
acquiring and the Byzantine replicas keep acting (docs/resharing.md): the
replica is killed and its data directory and key deleted; the survivors are
frozen while running (POST /admin/freeze) and their records exported; the new
set (same indices, a new node key for every member) runs "quorumfence reshare
run" as processes, dealt by the survivors; each new replica inherits 2f+1
of the frozen records, then starts; the new members endorse the new membership with
the group key; the proxies move to the new replicas and the clients and the
holder follow the endorsed membership. The guard is never reconfigured. The
last f indices stay Byzantine in the new set. Across the change a Byzantine
survivor reports a seeded lie as its frozen record (nothing, an absurdly high
epoch, another holder at the top), a Byzantine new replica runs no-record (its
inherited record is wiped when it starts), and Byzantine members sign another
membership when endorsing. No partition, kill or pause is injected while the
reshare runs; acquires fail as unavailable from the freeze until the switch.
The history check adds: the cluster id and group key unchanged, and every
resource's tokens under the new membership above those under the old one.
Progress shows each step of the reshare. The run does not end before the
reshare has finished and the workload has run 5 s and made 10 increments
on the new membership (at most 3 minutes past --duration).

Exit codes: 0 no violation; 1 a violation (listed), a counter mismatch, a
counter that could not be read, a reshare that did not complete, or a
failure; 2 bad flags.

options:
  --duration DURATION   how long to run, e.g. 60s, 3m            (default 3m)
  --seed N              seed of the fault schedule and workload   (default random; printed)
  --replicas 4|7        cluster size: f = 1 or f = 2              (default 4)
  --workers N           clients running increments                (default 3)
  --reshare             replace one replica by a reshare in the middle of the run
  --json                print the report as one JSON object
`;

export const command: Command = {
  summary: 'soak a local cluster under faults and Byzantine replicas, then check the history',
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, {
      duration: { type: 'string' },
      seed: { type: 'string' },
      replicas: { type: 'string' },
      workers: { type: 'string' },
      reshare: { type: 'boolean' },
      json: { type: 'boolean' },
    });
    const durationMs = parseDuration(values.duration, 'duration', DEFAULT_DURATION_MS);
    if (durationMs < 1_000) throw new QuorumFenceError('INVALID_OPTION', '--duration must be at least 1s');
    const seed =
      values.seed === undefined ? randomInt(1, 2 ** 31) : integerFlag(values.seed, 'seed', 0, 0, 2 ** 31 - 1);
    const replicas = integerFlag(values.replicas, 'replicas', 4, 4, 7);
    if (replicas !== 4 && replicas !== 7)
      throw new QuorumFenceError('INVALID_OPTION', `--replicas expects 4 or 7, got ${replicas}`);
    const workers = integerFlag(values.workers, 'workers', 3, 1, 32);
    const { runChaos, formatChaosReport, chaosReportClean } = await import('../testing/chaos.js');
    const tty = process.stderr.isTTY === true;
    process.stderr.write(
      `quorumfence-dev chaos: ${Math.round(durationMs / 1000)} s, seed ${seed}, ${replicas} replicas` +
        `${values.reshare ? ', a reshare in the middle' : ''}; starting the cluster...\n`,
    );
    let lastLine = 0;
    const report = await runChaos({
      durationMs,
      seed,
      replicas,
      workers,
      reshare: values.reshare === true,
      onReshareStep: (line) => process.stderr.write(`${tty ? '\r' : ''}reshare: ${line}`.padEnd(tty ? 101 : 0) + '\n'),
      onProgress: (p) => {
        const line = `[${Math.round(p.elapsedMs / 1000)}s/${Math.round(p.durationMs / 1000)}s] ops ${p.operations}  incremented ${p.incremented}  faults ${p.faults}  kills ${p.kills}  membership ${p.membershipVersion}  now: ${p.activeFault}`;
        if (tty) process.stderr.write(`\r${line.padEnd(100)}`);
        else if (p.elapsedMs - lastLine >= 10_000) {
          lastLine = p.elapsedMs;
          process.stderr.write(line + '\n');
        }
      },
    });
    if (tty) process.stderr.write('\n');
    if (values.json) process.stdout.write(JSON.stringify(report) + '\n');
    else process.stdout.write(`quorumfence-dev chaos\n${formatChaosReport(report)}\n`);
    return chaosReportClean(report) ? 0 : 1;
  },
};
