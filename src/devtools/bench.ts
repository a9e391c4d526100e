/**
 * `quorumfence-dev bench [SECTION...]`: the benchmark. Prints a table with a
 * progress line while it runs and writes every figure, the machine and the
 * exact command as JSON. It never fails on speed: targets are printed as
 * ratios beside the figures, all measured in the same run.
 */
import { mkdirSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { dirname, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { writeFileDurably } from '../common/files.js';
import { loadBackend } from '../crypto/load.js';
import { benchCrypto, type CryptoFigures } from '../bench/crypto.js';
import { benchEtcd, type EtcdFigures } from '../bench/etcd.js';
import { findEtcd } from '../bench/etcd-cluster.js';
import { benchGuard, postgresRows, type GuardBenchFigures } from '../bench/guard.js';
import { benchReplica, type ReplicaBenchFigures } from '../bench/replica.js';
import { measureTransportFloor, type TransportFloor } from '../bench/transport.js';
import { benchCeremony } from '../bench/ceremony.js';
import { benchGrowth } from '../bench/growth.js';
import { benchSystem, type SystemFigures } from '../bench/system.js';
import {
  comparisonTable,
  cryptoTable,
  floorMs,
  ms,
  profileTable,
  table,
  targetRows,
  thresholdOf,
  timing,
} from '../bench/report.js';
import { integerFlag, parseFlags, type Command } from '../command/args.js';

const SECTIONS = ['crypto', 'replica', 'guard', 'system', 'etcd', 'ceremony', 'growth'] as const;
type Section = (typeof SECTIONS)[number];

const usage = `usage: quorumfence-dev bench [SECTION...] [--quick] [--replicas 4|7] [--postgres URL] [--out FILE] [--json] [--profile]

Measures quorumfence on this machine, every process on this one box, and
writes every figure as JSON. It never fails on speed.

sections (default: all):
  crypto    sign, verify partial, combine (t = 3, 7, 21), verify token, batches of tokens; both backends
  replica   one replica: durable grants/s with 0, 1, 2 signing threads; signer scaling;
            the signing record alone (one write at a time, and three processes at once)
  guard     guarded writes/s with a cached token; first use of a new token
  system    N replicas + the reference resource: uncontended acquire p50/p99;
            acquire + release, and acquire + guarded write + release, with 1 client,
            16 on distinct resources and 16 on one hot resource; CPU per grant of
            all processes against the crypto floor; the bare wire (a WebSocket request
            and reply with the codec, nothing behind it): its CPU per round trip
  etcd      a 3-member etcd cluster on loopback, the same loops (lock [+ a txn
            conditional on the lock key's create revision] + unlock), driven by
            etcd's lock API over an undici keep-alive pool and by the etcd3 gRPC
            client; a stale revision's write is checked refused first. Needs etcd
            on PATH (Debian: apt-get install etcd-server), skipped otherwise
  ceremony  the dealerless key ceremony for N = 4 and 7 on loopback (targets 2 s, 5 s)
  growth    one replica's store size, RSS and restart time after 10^3 .. 10^6 distinct
            resources ever granted, compacted to 10^3 live (--quick stops at 10^5)

options:
  --quick          short runs (about a minute in all)
  --replicas N     cluster size for the system section: 4 or 7   (default 4)
  --postgres URL   also measure the PostgreSQL guard (postgres://user:pass@host/db)
  --out FILE       where to write the JSON   (default bench-results/bench-<time>.json)
  --json           print the JSON to stdout instead of the table
  --profile        system: also run the 1- and 16-client fenced-write loops on fresh
                   processes under node --cpu-prof (the client through the inspector)
                   and print where each process kind spends CPU, ms per grant
`;

function progress(line: string): void {
  if (process.stderr.isTTY) process.stderr.write(`\r\x1b[2K${line}`);
  else process.stderr.write(`${line}\n`);
}

export const command: Command = {
  summary: 'measure crypto, replicas, guards and the whole system (and etcd beside it)',
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      {
        quick: { type: 'boolean' },
        out: { type: 'string' },
        json: { type: 'boolean' },
        replicas: { type: 'string' },
        postgres: { type: 'string' },
        profile: { type: 'boolean' },
      },
      { max: SECTIONS.length },
    );
    for (const p of positionals) {
      if (!(SECTIONS as readonly string[]).includes(p))
        throw new QuorumFenceError('INVALID_OPTION', `unknown section "${p}"; sections are ${SECTIONS.join(', ')}`);
    }
    const sections = new Set((positionals.length > 0 ? positionals : [...SECTIONS]) as Section[]);
    const quick = values.quick ?? false;
    const n = integerFlag(values.replicas, 'replicas', 4, 4, 7);
    if (n !== 4 && n !== 7) throw new QuorumFenceError('INVALID_OPTION', `--replicas is 4 or 7, got ${n}`);
    const cores = availableParallelism();
    const report: Record<string, unknown> = {
      // A --postgres URL may carry a password: the report keeps the user and host only.
      command: ['quorumfence-dev', 'bench', ...argv].join(' ').replace(/(\/\/[^:/@\s]+):[^@\s]*@/g, '$1:***@'),
      startedAt: new Date().toISOString(),
      machine: {
        cores,
        cpu: cpus()[0]?.model ?? 'unknown',
        node: process.version,
        platform: `${process.platform}-${process.arch}`,
        backend: loadBackend().name,
        loadAverageAtStart: loadavg()[0],
      },
      quick,
    };
    const out: string[] = [];

    let crypto: CryptoFigures[] = [];
    // The system section's floor needs the native crypto figures from this same run.
    if (sections.has('crypto') || sections.has('system')) {
      for (const backend of sections.has('crypto') ? (['blst', 'noble'] as const) : (['blst'] as const)) {
        progress(`crypto: ${backend} ...`);
        try {
          crypto.push(benchCrypto(backend, { quick, thresholds: quick && backend === 'noble' ? [3, 7] : [3, 7, 21] }));
        } catch (error) {
          if (!(error instanceof QuorumFenceError && error.code === 'BACKEND_UNAVAILABLE')) throw error;
          progress(`crypto: ${backend} unavailable, skipped`);
        }
      }
      crypto = crypto.filter(Boolean);
      report.crypto = crypto;
      if (sections.has('crypto')) out.push(cryptoTable(crypto));
    }

    if (sections.has('replica')) {
      const replica: ReplicaBenchFigures = await benchReplica({
        quick,
        workerCounts: [1, 2],
        repeats: quick ? 1 : 3,
        progress,
      });
      report.replica = replica;
      const rows = [['one replica, durable grants', 'median/s', 'best/s']];
      for (const g of replica.grants)
        rows.push([`${g.signingWorkers} signing thread(s)`, g.medianPerSecond.toFixed(0), g.bestPerSecond.toFixed(0)]);
      rows.push([
        'signer alone, 2 threads / 1 thread',
        `${replica.signing.medianScaling.toFixed(2)}x`,
        `${replica.signing.bestScaling.toFixed(2)}x`,
      ]);
      rows.push(['signing record alone (records/s)', replica.store.recordsPerSecond.toFixed(0), '']);
      rows.push(['signing record, one write at a time, to flushed (p50 ms)', ms(replica.store.oneWriteMs.median), '']);
      const together = replica.storesTogether;
      rows.push([
        `${together.stores} signing records in ${together.stores} processes, one write each at once: each, all (p50 ms)`,
        `${ms(together.eachMs.median)}, ${ms(together.allMs.median)}`,
        '',
      ]);
      const storm = replica.handshakes;
      if (storm.length > 0)
        rows.push([
          `${storm[0]!.connections} connections authenticating at once: replica CPU per connection (ms), runs`,
          storm.map((h) => ms(h.replicaCpuMsEach)).join(', '),
          '',
        ]);
      out.push(table(rows));
    }

    if (sections.has('guard')) {
      progress('guard: LMDB cached token, first use ...');
      const postgres = values.postgres ? { connectionString: values.postgres } : undefined;
      const guard: GuardBenchFigures = await benchGuard({ quick, ...(postgres ? { postgres } : {}) });
      report.guard = guard;
      const rows = [
        ['guard', 'figure'],
        ['LMDB, cached token, durable writes/s', guard.lmdbCachedToken.perSecond.toFixed(0)],
        ['first use of a new token: verify', timing(guard.firstUse.verifyMs)],
        ['first use of a new token: whole durable write', timing(guard.firstUse.writeMs)],
      ];
      if (guard.postgres) {
        rows.push(...postgresRows(guard.postgres));
      }
      out.push(table(rows));
    }

    let system: SystemFigures | undefined;
    let transport: TransportFloor[] = [];
    if (sections.has('system')) {
      system = await benchSystem({ replicas: n, quick, progress, profile: values.profile ?? false });
      report.system = system;
      progress('system: the bare wire (WebSocket + codec, nothing behind it), 1 and 16 connections ...');
      transport = [await measureTransportFloor(1, quick ? 1 : 3), await measureTransportFloor(16, quick ? 1 : 3)];
      report.transport = transport;
      if (system.profile) out.push(profileTable(system.profile));
    }
    let etcd: EtcdFigures | undefined;
    if (sections.has('etcd')) {
      if (findEtcd()) {
        etcd = await benchEtcd({ quick, progress });
        report.etcd = etcd;
      } else {
        report.etcd = { skipped: 'etcd is not on PATH (Debian: apt-get install etcd-server)' };
        out.push('etcd: skipped; install it to compare (Debian: apt-get install etcd-server)');
      }
    }
    if (system || etcd) out.push(comparisonTable(system, etcd, n));
    if (system && crypto[0]) {
      const floor = floorMs(crypto[0], n);
      const targets = targetRows(system, etcd?.drivers, floor);
      report.targets = { floorMs: floor, rows: targets };
      const b = system.cpuBreakdownMs;
      out.push(
        table([
          ['CPU per grant (all processes, 16 distinct clients, fenced write)', 'figure'],
          [`crypto floor: t = ${thresholdOf(n)} signs + combine + 2 token verifies`, `${ms(floor)} ms`],
          [`CPU-bound rate on ${cores} cores`, `${((cores * 1000) / floor).toFixed(0)}/s`],
          [
            `measured: replicas ${ms(b.replicas)} (main threads ${ms(b.replicasMainThread)}) + resource ${ms(b.resource)} + client ${ms(b.client)}`,
            `${ms(system.cpuPerGrantMs)} ms`,
          ],
          ...transport.map((t) => [
            `bare wire, one request + reply, ${t.connections} connection(s), both ends (x 6 per cycle)`,
            `${ms(t.totalCpuMs)} ms (${ms(6 * t.totalCpuMs)} ms)`,
          ]),
        ]),
      );
      out.push(
        table([
          [
            'target (issue 13; fenced-write loops, etcd = its stronger driver per row)',
            'quorumfence',
            'etcd',
            'ratio',
            'target',
            '',
          ],
          ...targets.map((t) => [
            t.target,
            t.quorumfence,
            t.etcd,
            t.ratio === undefined ? '' : `${t.ratio.toFixed(2)}x`,
            t.wanted,
            t.pass === undefined ? 'n/a' : t.pass ? 'pass' : 'MISS',
          ]),
        ]),
      );
    }
    if (sections.has('ceremony')) out.push(await benchCeremony({ quick, progress, report }));
    if (sections.has('growth')) out.push(await benchGrowth({ quick, progress, report }));
    progress('done');
    if (process.stderr.isTTY) process.stderr.write('\n');
    (report.machine as Record<string, unknown>).loadAverageAtEnd = loadavg()[0];

    const file = resolve(values.out ?? `bench-results/bench-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
    mkdirSync(dirname(file), { recursive: true });
    const json = JSON.stringify(report, (_, v) => (typeof v === 'bigint' ? v.toString() : v), 2) + '\n';
    writeFileDurably(file, json);
    if (values.json) process.stdout.write(json);
    else
      process.stdout.write(
        `${out.join('\n\n')}\n\nmachine: ${cores} cores, ${report.machine && (report.machine as { cpu: string }).cpu}, node ${process.version}\nfigures written to ${file}\n`,
      );
    return 0;
  },
};
