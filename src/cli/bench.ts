/**
 * `quorumfence bench [SECTION...]`: the benchmark. Prints a table with a
 * progress line while it runs and writes every figure, the machine and the
 * exact command as JSON. It never fails on speed.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { dirname, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { loadBackend } from '../crypto/load.js';
import { benchCrypto, type CryptoFigures } from '../bench/crypto.js';
import { parseFlags, type Command } from './args.js';

const SECTIONS = ['crypto'] as const;
type Section = (typeof SECTIONS)[number];

const usage = `usage: quorumfence bench [SECTION...] [--quick] [--out FILE] [--json]

Measures quorumfence on this machine and writes every figure as JSON.
Sections (default: all): ${SECTIONS.join(', ')}
  crypto   sign, verify partial, combine (t = 3, 7, 21), verify token; both backends

options:
  --quick        shorter runs (under a minute in all)
  --out FILE     where to write the JSON   (default bench-results/bench-<time>.json)
  --json         print the JSON to stdout instead of the table
`;

function progress(line: string): void {
  if (process.stderr.isTTY) process.stderr.write(`\r\x1b[2K${line}`);
  else process.stderr.write(`${line}\n`);
}

function ms(value: number): string {
  return value >= 10 ? value.toFixed(1) : value.toFixed(3);
}

function cryptoTable(figures: CryptoFigures[]): string {
  const rows: [string, ...string[]][] = [['operation (median ms)', ...figures.map((f) => f.backend)]];
  rows.push(['sign', ...figures.map((f) => ms(f.signMs.median))]);
  rows.push(['verify partial', ...figures.map((f) => ms(f.verifyPartialMs.median))]);
  rows.push(['verify token (decode + pairing)', ...figures.map((f) => ms(f.verifyTokenMs.median))]);
  for (const t of Object.keys(figures[0]!.combineMs)) rows.push([`combine t = ${t}`, ...figures.map((f) => ms(f.combineMs[t]!.median))]);
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  return rows.map((r) => r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('   ')).join('\n');
}

export const command: Command = {
  summary: 'measure crypto, replicas, clients and guards on this machine',
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(argv, { quick: { type: 'boolean' }, out: { type: 'string' }, json: { type: 'boolean' } }, { max: SECTIONS.length });
    for (const p of positionals) {
      if (!(SECTIONS as readonly string[]).includes(p)) {
        throw new QuorumFenceError('INVALID_OPTION', `unknown section "${p}"; sections are ${SECTIONS.join(', ')}`);
      }
    }
    const sections = (positionals.length > 0 ? positionals : [...SECTIONS]) as Section[];
    const quick = values.quick ?? false;
    const report: Record<string, unknown> = {
      command: ['quorumfence', 'bench', ...argv].join(' '),
      startedAt: new Date().toISOString(),
      machine: {
        cores: availableParallelism(),
        cpu: cpus()[0]?.model ?? 'unknown',
        node: process.version,
        platform: `${process.platform}-${process.arch}`,
        defaultBackend: loadBackend().name,
      },
      quick,
    };
    const tables: string[] = [];

    if (sections.includes('crypto')) {
      const figures: CryptoFigures[] = [];
      for (const backend of ['blst', 'noble'] as const) {
        progress(`crypto: ${backend} ...`);
        try {
          figures.push(benchCrypto(backend, { quick }));
        } catch (error) {
          if (!(error instanceof QuorumFenceError && error.code === 'BACKEND_UNAVAILABLE')) throw error;
          progress(`crypto: ${backend} unavailable, skipped`);
        }
      }
      report.crypto = figures;
      tables.push(`Crypto floor\n${cryptoTable(figures)}`);
    }
    progress('done');
    if (process.stderr.isTTY) process.stderr.write('\n');

    const out = resolve(values.out ?? `bench-results/bench-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, JSON.stringify(report, null, 2) + '\n');
    if (values.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
    else process.stdout.write(`${tables.join('\n\n')}\n\nfigures written to ${out}\n`);
    return 0;
  },
};
