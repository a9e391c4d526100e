/**
 * CPU profiles of the benchmark's processes (`node --cpu-prof` for the
 * replicas and the resource, the inspector for the client in this process),
 * reduced to self time per function, grouped into buckets and divided by the
 * grants made while the profiles ran. Only samples inside the loop's time
 * window count: V8 stamps samples with the monotonic clock that
 * process.hrtime reads, the same in every process on one machine.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';

/** The parts of a .cpuprofile (V8's Profiler.Profile) this module reads. */
export interface CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber?: number };
  }[];
  /** Microseconds, monotonic clock. */
  readonly startTime: number;
  readonly endTime: number;
  /** The node id on top of the stack at each sample. */
  readonly samples: readonly number[];
  /** Microseconds from the previous sample (the first: from startTime). */
  readonly timeDeltas: readonly number[];
}

export const BUCKETS = ['crypto', 'lmdb/fsync', 'socket I/O', 'msgpack', 'gc', 'other'] as const;
export type Bucket = (typeof BUCKETS)[number];

/** Which bucket a function's self time belongs to, by its script and name. */
export function bucketOf(functionName: string, url: string): Bucket {
  if (functionName === '(garbage collector)') return 'gc';
  // Native frames without a script. sigValidate: blst's subgroup check. custom_gc: the name the
  // profiler resolves for code inside blst's native addon (napi-rs) in some processes; a loop of
  // nothing but token verifications, profiled through the inspector, is almost all custom_gc.
  if (functionName === 'custom_gc') return 'crypto';
  if (
    /blst|@noble|\/crypto\/|pairing/i.test(url) ||
    /^(sign|verify|pairing|combine|hashToG2|sigValidate|keyValidate|aggregate)/i.test(functionName)
  )
    return 'crypto';
  if (/lmdb|node:fs|signing-record|guard-store/i.test(url) || /fsync|fdatasync|flushed/i.test(functionName))
    return 'lmdb/fsync';
  if (/msgpackr/i.test(url)) return 'msgpack';
  if (
    /\/ws\/|node:net|node:_http|node:http|node:stream|node:internal\/stream|node:internal\/http|node:tls|undici/i.test(
      url,
    ) ||
    /^(writev|writeBuffer|writeUtf8String|writeLatin1String|onStreamRead|shutdown)$/.test(functionName)
  )
    return 'socket I/O';
  return 'other';
}

/** Parses a .cpuprofile's JSON text; throws a clear error when it is not one. */
export function parseProfile(text: string): CpuProfile {
  const value = JSON.parse(text) as Partial<CpuProfile>;
  if (
    !Array.isArray(value.nodes) ||
    !Array.isArray(value.samples) ||
    !Array.isArray(value.timeDeltas) ||
    typeof value.startTime !== 'number' ||
    value.samples.length !== value.timeDeltas.length
  )
    throw new QuorumFenceError('INVALID_ARGUMENT', 'not a CPU profile (nodes, samples, timeDeltas, startTime)');
  return value as CpuProfile;
}

/** A window of the monotonic clock, microseconds. */
export interface Window {
  readonly fromUs: number;
  readonly toUs: number;
}

/** Now on the clock profiles use, microseconds. */
export function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/**
 * Self time in ms per function ("name script:line"), of samples inside
 * `window` (all when absent). A sample's time is the gap to the next sample,
 * as DevTools counts it; idle time is left out.
 */
export function selfTimeMs(profile: CpuProfile, window?: Window): Map<string, { ms: number; bucket: Bucket }> {
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const totals = new Map<string, { ms: number; bucket: Bucket }>();
  let at = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i]!;
    const gap = i + 1 < profile.timeDeltas.length ? profile.timeDeltas[i + 1]! : profile.endTime - at;
    if (window && (at < window.fromUs || at > window.toUs)) continue;
    const frame = frames.get(profile.samples[i]!);
    if (!frame || frame.functionName === '(idle)') continue;
    const script = frame.url.slice(frame.url.lastIndexOf('/') + 1);
    const name = frame.functionName || '(anonymous)';
    const key = script ? `${name} ${script}:${(frame.lineNumber ?? 0) + 1}` : name;
    const entry = totals.get(key) ?? { ms: 0, bucket: bucketOf(frame.functionName, frame.url) };
    entry.ms += Math.max(0, gap) / 1000;
    totals.set(key, entry);
  }
  return totals;
}

export interface KindBreakdown {
  /** ms per grant in each bucket (scaled to the measured CPU time when one was given). */
  readonly buckets: Record<Bucket, number>;
  readonly totalMsPerGrant: number;
  /** What the samples add up to, ms per grant, before scaling: wall time the threads were not idle. */
  readonly sampledMsPerGrant: number;
  /** The functions with the most self time, ms per grant. */
  readonly top: readonly { readonly fn: string; readonly bucket: Bucket; readonly msPerGrant: number }[];
  readonly profiles: number;
}

/**
 * Sums the profiles of one process kind (e.g. all replicas and their threads)
 * per grant. V8 samples on a wall clock: a thread that is runnable but not
 * running (a loaded machine) keeps collecting samples, so the samples
 * overstate CPU. Given the kind's measured CPU ms per grant (from /proc, same
 * window), every figure is scaled to it: the profile then says where that CPU
 * went, in proportion to the samples.
 */
export function breakdown(
  profiles: readonly CpuProfile[],
  grants: number,
  options: { window?: Window; topN?: number; cpuMsPerGrant?: number } = {},
): KindBreakdown {
  if (!(grants > 0)) throw new QuorumFenceError('INVALID_ARGUMENT', `grants must be positive, got ${grants}`);
  const { window, topN = 8, cpuMsPerGrant } = options;
  const merged = new Map<string, { ms: number; bucket: Bucket }>();
  for (const profile of profiles)
    for (const [fn, { ms, bucket }] of selfTimeMs(profile, window)) {
      const entry = merged.get(fn) ?? { ms: 0, bucket };
      entry.ms += ms;
      merged.set(fn, entry);
    }
  const sampledMsPerGrant = [...merged.values()].reduce((sum, { ms }) => sum + ms, 0) / grants;
  const scale = cpuMsPerGrant !== undefined && sampledMsPerGrant > 0 ? cpuMsPerGrant / sampledMsPerGrant : 1;
  const buckets = Object.fromEntries(BUCKETS.map((b) => [b, 0])) as Record<Bucket, number>;
  for (const { ms, bucket } of merged.values()) buckets[bucket] += (ms * scale) / grants;
  const top = [...merged.entries()]
    .sort((a, b) => b[1].ms - a[1].ms)
    .slice(0, topN)
    .map(([fn, { ms, bucket }]) => ({ fn, bucket, msPerGrant: (ms * scale) / grants }));
  return {
    buckets,
    totalMsPerGrant: Object.values(buckets).reduce((a, b) => a + b, 0),
    sampledMsPerGrant,
    top,
    profiles: profiles.length,
  };
}

/** Every .cpuprofile under `dir` (one per process and thread that --cpu-prof-dir wrote there). */
export function readProfiles(dir: string): CpuProfile[] {
  return readdirSync(dir)
    .filter((name) => name.endsWith('.cpuprofile'))
    .map((name) => parseProfile(readFileSync(join(dir, name), 'utf8')));
}
