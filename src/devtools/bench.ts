/**
 * `quorumfence-dev bench [SECTION...]`: the benchmark. Prints a table with a
 * progress line while it runs and writes every figure, the machine and the
 * exact command as JSON. It never fails on speed: targets are printed as
 * ratios beside the figures, all measured in the same run. A section whose
 * server is missing (etcd not on PATH, no --postgres URL) is skipped and says
 * why; a section that throws is reported as failed, in the table and the
 * JSON, the others still run, and the command exits 1.
 */
import { mkdirSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { basename, dirname, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { writeFileDurably } from '../common/files.js';
import { loadBackend } from '../crypto/load.js';
import { benchCrypto, type CryptoFigures } from '../bench/crypto.js';
import { benchEtcd, type EtcdFigures } from '../bench/etcd.js';
import { findEtcd } from '../bench/etcd-cluster.js';
import { benchGuard } from '../bench/guard.js';
import { benchReplica } from '../bench/replica.js';
import { measureTransportFloor, type TransportFloor } from '../bench/transport.js';
import { benchCeremony } from '../bench/ceremony.js';
import { benchGrowth } from '../bench/growth.js';
import { failedOf, type BenchSize, type Skipped } from '../bench/measure.js';
import { benchSystem, type SystemFigures } from '../bench/system.js';
import { benchNetwork, networkFailures } from '../bench/network-bench.js';
import { writeNetworkChart } from '../bench/network-chart.js';
import { networkSummary, pointText } from '../bench/network-report.js';
import { parseRtts } from '../bench/network.js';
import {
  benchGray,
  GRAY_CLIENTS,
  GRAY_FAULTS,
  GRAY_FAULT_KINDS,
  grayFailures,
  parseGrayFaults,
} from '../bench/gray.js';
import { writeGrayChart } from '../bench/gray-chart.js';
import { grayFaultText, grayHeading, graySummary } from '../bench/gray-report.js';
import {
  comparisonTable,
  cpuTable,
  cryptoTable,
  cryptoFloor,
  guardTable,
  profileTable,
  replicaTable,
  targetRows,
  targetTable,
} from '../bench/report.js';
import { integerFlag, parseFlags, type Command } from '../command/args.js';

const SECTIONS = ['crypto', 'replica', 'guard', 'system', 'etcd', 'ceremony', 'growth'] as const;
type Section = (typeof SECTIONS)[number];

/** Words of `text` in lines of at most `width` characters. */
function wrapWords(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  return line ? [...lines, line] : lines;
}

/** One fault's lines in --help: its name, then what it emulates, wrapped under it. */
function grayFaultHelp(kind: (typeof GRAY_FAULT_KINDS)[number]): string {
  const { takesMs, etcd, emulates } = GRAY_FAULTS[kind];
  const text = `${emulates}${etcd ? '' : ' (quorumfence only)'}`;
  return [
    `                     ${takesMs ? `${kind}:MS` : kind}`,
    ...wrapWords(text, 66).map((l) => `                       ${l}`),
  ].join('\n');
}

const usage = `usage: quorumfence-dev bench [SECTION...] [--quick | --smoke] [--replicas 4|7] [--postgres URL] [--out FILE] [--json] [--profile]
       quorumfence-dev bench [system] [etcd] --rtt LIST [--quick | --smoke] [--replicas 4|7] [--out FILE] [--json]
       quorumfence-dev bench [system] [etcd] --gray FAULT[,FAULT...] [--rtt RTT] [--gray-replica N] [--quick | --smoke] ...

Measures quorumfence on this machine, every process on this one box, and
writes every figure as JSON. It never fails on speed. A section whose server
is missing is skipped and says why; a section that fails is reported, the
others still run, and the command exits 1.

sections (default: all):
  crypto    sign, verify partial, combine (t = 3, 7, 21), verify token, batches of tokens; both
            backends; median wall time per call, and CPU per call (every thread) for the floor's operations
  replica   one replica: durable grants/s with 1 and 2 signing threads; signer scaling;
            the signing record alone (one write at a time, and three processes at once)
  guard     guarded writes/s with a cached token; first use of a new token; with
            --postgres, the PostgreSQL guard's two forms beside a plain UPDATE (skipped without)
  system    N replicas + the reference resource: uncontended acquire p50/p99;
            acquire + release, and acquire + guarded write + release, with 1 client,
            16 on distinct resources and 16 on one hot resource; CPU per grant of
            all processes against the crypto floor (t signs + combine + 2 token checks, by CPU per
            call; by median wall time beside it); the bare wire (a WebSocket request
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
  --quick          short runs (a few minutes in all)
  --smoke          the smallest runs that still take every step of each section, to check
                   that it completes and prints its table (the test suite runs each section
                   so); its figures mean nothing
  --replicas N     cluster size for the system section: 4 or 7   (default 4)
  --postgres URL   also measure the PostgreSQL guard (postgres://user:pass@host/db)
  --out FILE       where to write the JSON   (default bench-results/bench-<time>.json)
  --json           print the JSON to stdout instead of the table
  --profile        system: also run the 1- and 16-client fenced-write loops on fresh
                   processes under node --cpu-prof (the client through the inspector)
                   and print where each process kind spends CPU, ms per grant
  --rtt LIST       the system and etcd sections once per round-trip time (e.g. 0,2ms,20ms;
                   0 = loopback), every link of both systems through delay proxies in a
                   process of their own (a fixed one-way delay of half the round trip per
                   direction): the client to each replica and to the guarded resource, the
                   client to each etcd member, and etcd's peer links. Prints both sides and
                   issue 31's targets per round trip, then a summary across them (Markdown),
                   and writes a chart (PNG through the system's chromium; SVG without it)
                   next to the JSON, same name
  --gray LIST      gray faults: one node of each system slow, hung or lying slow, on the
                   --rtt network (one round trip; default 2ms). For each fault, the
                   acquire + release loops of --rtt (1 client; 16 on distinct resources;
                   16 on one hot resource), each run healthy and then faulted on the same
                   processes; each figure as a ratio to the same system's healthy run and
                   as quorumfence / etcd: a Markdown table per fault, a summary, and a
                   chart next to the JSON, same name. A flag of the network bench rather
                   than a section, as it runs those sections' loops on --rtt's proxies;
                   the sections named pick the systems. The fault strikes quorumfence
                   replica --gray-replica; etcd's leader (moved there first through the
                   maintenance API, MoveLeader, and checked) and, separately, a follower,
                   etcd's clients dialing the other members. It begins after each loop's
                   warm-up; the cycles count from 1 s later (0.2 s with --smoke, which
                   also runs 4 clients, and one etcd client per variant). Faults (MS: a
                   duration, default 50ms):
${GRAY_FAULT_KINDS.map((kind) => grayFaultHelp(kind)).join('\n')}
                   slow-flush builds a small library with the C compiler (cc; Debian: gcc)
                   and is skipped without one
  --gray-replica N the quorumfence replica the --gray faults strike   (default 1)
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
        smoke: { type: 'boolean' },
        out: { type: 'string' },
        json: { type: 'boolean' },
        replicas: { type: 'string' },
        postgres: { type: 'string' },
        profile: { type: 'boolean' },
        rtt: { type: 'string' },
        gray: { type: 'string' },
        'gray-replica': { type: 'string' },
      },
      { max: SECTIONS.length },
    );
    for (const p of positionals) {
      if (!(SECTIONS as readonly string[]).includes(p))
        throw new QuorumFenceError('INVALID_OPTION', `unknown section "${p}"; sections are ${SECTIONS.join(', ')}`);
    }
    if (values.quick && values.smoke) throw new QuorumFenceError('INVALID_OPTION', '--quick and --smoke: pick one');
    const rtts = values.rtt === undefined ? undefined : parseRtts(values.rtt);
    const grayFaults = values.gray === undefined ? undefined : parseGrayFaults(values.gray);
    const flag = grayFaults ? '--gray' : '--rtt';
    if ((rtts || grayFaults) && positionals.some((p) => p !== 'system' && p !== 'etcd'))
      throw new QuorumFenceError('INVALID_OPTION', `${flag} measures the system and etcd sections only`);
    if ((rtts || grayFaults) && values.profile)
      throw new QuorumFenceError('INVALID_OPTION', `${flag} and --profile: pick one`);
    if (grayFaults && rtts && (rtts.length !== 1 || rtts[0] === 0))
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--gray runs on one delayed network: --rtt names one round trip above 0 (default 2ms), got "${values.rtt}"`,
      );
    if (values['gray-replica'] !== undefined && !grayFaults)
      throw new QuorumFenceError(
        'INVALID_OPTION',
        '--gray-replica names the replica --gray faults strike: give --gray',
      );
    const sections = new Set(
      (positionals.length > 0 ? positionals : rtts || grayFaults ? ['system', 'etcd'] : [...SECTIONS]) as Section[],
    );
    const size: BenchSize = values.smoke ? 'smoke' : values.quick ? 'quick' : 'full';
    const n = integerFlag(values.replicas, 'replicas', 4, 4, 7);
    if (n !== 4 && n !== 7) throw new QuorumFenceError('INVALID_OPTION', `--replicas is 4 or 7, got ${n}`);
    const grayReplica = integerFlag(values['gray-replica'], 'gray-replica', 1, 1, n);
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
      quick: size !== 'full',
      size,
    };
    const out: string[] = [];
    const failed: string[] = [];
    /** Runs one section (its figures into report[name]); one that throws is reported and the next one runs. */
    const attempt = async (name: string, run: () => Promise<void>): Promise<void> => {
      try {
        await run();
      } catch (error) {
        const section = failedOf(error);
        const { code, message } = section.failed;
        report[name] = section;
        out.push(`${name}: FAILED (${code}): ${message}`);
        failed.push(name);
        progress(`${name}: FAILED (${code}): ${message}`);
        // Anything but the project's own error is a bug: its stack says where.
        if (!(error instanceof QuorumFenceError) && error instanceof Error) process.stderr.write(`${error.stack}\n`);
      }
    };

    const file = resolve(values.out ?? `bench-results/bench-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
    if (grayFaults)
      await attempt('gray', async () => {
        const gray = await benchGray({
          faults: grayFaults,
          rttMs: rtts?.[0] ?? 2,
          size,
          replicas: n,
          grayReplica,
          system: sections.has('system'),
          etcd: sections.has('etcd'),
          progress,
        });
        report.gray = gray;
        const clients = GRAY_CLIENTS[size];
        out.push(grayHeading(gray), ...gray.faults.map((f) => grayFaultText(f, clients)), graySummary(gray, clients));
        const machine = report.machine as { cores: number; cpu: string };
        const caption = `${machine.cores} cores (${machine.cpu}), every process on this one box, load average ${gray.loadAverage.start.toFixed(1)}-${gray.loadAverage.end.toFixed(1)}; ${size} run, ${String(report.startedAt).slice(0, 10)}`;
        mkdirSync(dirname(file), { recursive: true });
        const chart = await writeGrayChart(file, gray, caption, clients);
        // Its name only, as the network chart's.
        report.gray = { ...gray, chart: basename(chart.file) };
        out.push(chart.line);
        const parts = grayFailures(gray);
        if (parts.length > 0) {
          out.push(`gray: FAILED: ${parts.join(', ')}`);
          failed.push('gray');
        }
      });
    else if (rtts)
      await attempt('network', async () => {
        const points = await benchNetwork({
          rtts,
          size,
          replicas: n,
          system: sections.has('system'),
          etcd: sections.has('etcd'),
          progress,
        });
        report.network = { rtts, points };
        out.push(...points.map((point) => pointText(point, n)), networkSummary(points));
        const machine = report.machine as { cores: number; cpu: string };
        const loads = points.flatMap((p) => [p.loadAverage.start, p.loadAverage.end]);
        const caption = `${machine.cores} cores (${machine.cpu}), every process on this one box, load average ${Math.min(...loads).toFixed(1)}-${Math.max(...loads).toFixed(1)}; ${size} run, ${String(report.startedAt).slice(0, 10)}`;
        mkdirSync(dirname(file), { recursive: true });
        const chart = await writeNetworkChart(file, points, caption, n);
        // Its name only: the chart lies next to the JSON wherever the two are moved (a machine's path means nothing).
        report.network = { rtts, points, chart: basename(chart.file) };
        out.push(chart.line);
        const parts = networkFailures(points);
        if (parts.length > 0) {
          out.push(`network: FAILED: ${parts.join(', ')}`);
          failed.push('network');
        }
      });
    const crypto: CryptoFigures[] = [];
    // The system section's floor needs the native crypto figures from this same run.
    const networked = rtts !== undefined || grayFaults !== undefined;
    if (!networked && (sections.has('crypto') || sections.has('system'))) {
      await attempt('crypto', async () => {
        for (const backend of sections.has('crypto') ? (['blst', 'noble'] as const) : (['blst'] as const)) {
          progress(`crypto: ${backend} ...`);
          // The reference backend is 30-50x slower: fewer thresholds unless the run is full.
          const thresholds = size === 'smoke' ? [3] : size === 'quick' && backend === 'noble' ? [3, 7] : [3, 7, 21];
          try {
            crypto.push(
              benchCrypto(backend, { size, thresholds, ...(size === 'smoke' ? { batchSizes: [1, 2] } : {}) }),
            );
          } catch (error) {
            if (!(error instanceof QuorumFenceError && error.code === 'BACKEND_UNAVAILABLE')) throw error;
            progress(`crypto: ${backend} unavailable, skipped`);
          }
        }
        report.crypto = crypto;
        if (sections.has('crypto')) out.push(cryptoTable(crypto));
      });
    }

    if (sections.has('replica'))
      await attempt('replica', async () => {
        const replica = await benchReplica({ size, workerCounts: [1, 2], progress });
        report.replica = replica;
        out.push(replicaTable(replica));
      });

    if (sections.has('guard'))
      await attempt('guard', async () => {
        progress('guard: LMDB cached token, first use ...');
        const postgres = values.postgres ? { connectionString: values.postgres } : undefined;
        const guard = await benchGuard({ size, ...(postgres ? { postgres } : {}) });
        report.guard = guard;
        out.push(guardTable(guard));
      });

    let system: SystemFigures | undefined;
    let transport: TransportFloor[] = [];
    if (!networked && sections.has('system'))
      await attempt('system', async () => {
        const figures = await benchSystem({ replicas: n, size, progress, profile: values.profile ?? false });
        progress('system: the bare wire (WebSocket + codec, nothing behind it), 1 and 16 connections ...');
        const wire = {
          full: { seconds: 3, warmup: 0.5 },
          quick: { seconds: 1, warmup: 0.5 },
          smoke: { seconds: 0.1, warmup: 0.1 },
        }[size];
        transport = [
          await measureTransportFloor(1, wire.seconds, wire.warmup),
          await measureTransportFloor(16, wire.seconds, wire.warmup),
        ];
        system = figures;
        report.system = system;
        report.transport = transport;
        if (system.profile) out.push(profileTable(system.profile));
      });
    let etcd: EtcdFigures | undefined;
    if (!networked && sections.has('etcd'))
      await attempt('etcd', async () => {
        if (findEtcd()) {
          etcd = await benchEtcd({ size, progress });
          report.etcd = etcd;
        } else {
          const skipped: Skipped = { skipped: 'etcd is not on PATH (Debian: apt-get install etcd-server)' };
          report.etcd = skipped;
          out.push(`etcd: skipped, ${skipped.skipped}`);
        }
      });
    if (system || etcd) out.push(comparisonTable(system, etcd, n));
    if (system && crypto[0]) {
      const floor = cryptoFloor(crypto[0], n);
      const targets = targetRows(system, etcd?.drivers, floor);
      report.targets = { floorMs: floor.cpu, wallClockFloorMs: floor.wall, rows: targets };
      out.push(cpuTable(system, transport, floor, n, cores));
      out.push(targetTable(targets));
    }
    if (sections.has('ceremony'))
      await attempt('ceremony', async () => void out.push(await benchCeremony({ size, progress, report })));
    if (sections.has('growth'))
      await attempt('growth', async () => void out.push(await benchGrowth({ size, progress, report })));
    progress(failed.length > 0 ? `done; failed: ${failed.join(', ')}` : 'done');
    if (process.stderr.isTTY) process.stderr.write('\n');
    (report.machine as Record<string, unknown>).loadAverageAtEnd = loadavg()[0];
    report.failedSections = failed;

    mkdirSync(dirname(file), { recursive: true });
    const json = JSON.stringify(report, (_, v) => (typeof v === 'bigint' ? v.toString() : v), 2) + '\n';
    writeFileDurably(file, json);
    if (values.json) process.stdout.write(json);
    else
      process.stdout.write(
        `${out.join('\n\n')}\n\nmachine: ${cores} cores, ${report.machine && (report.machine as { cpu: string }).cpu}, node ${process.version}\nfigures written to ${file}\n`,
      );
    return failed.length > 0 ? 1 : 0;
  },
};
