/**
 * `bench --profile`: the system bench's fenced-write loops again, on fresh
 * processes under --cpu-prof (this process through the inspector), reduced to
 * where each process kind's CPU goes per grant (profile.ts). Apart from
 * system.ts because it is a run of its own, on processes of its own, that only
 * the profile section takes.
 */
import { join } from 'node:path';
import { Session } from 'node:inspector/promises';
import { breakdown, monotonicUs, readProfiles, type CpuProfile, type KindBreakdown } from './profile.js';
import { cpuNow, cpuPerGrant, type CpuPerGrant } from './counters.js';
import { LOOPBACK } from './network.js';
import { freshNames, type LoopRate } from './measure.js';
import { acquireLoop, reach } from './system-loop.js';
import { startSystem } from './system-processes.js';

/**
 * A profiled loop. The profile gives the proportions (which functions, which
 * buckets); the amounts are the CPU per grant measured from /proc in the same
 * loop run without the profiler (the profiler's own sampling costs CPU too,
 * cpuUnderProfilerMs, which would otherwise be spread over every bucket).
 */
export interface LoopProfile {
  readonly loop: LoopRate;
  readonly grants: number;
  readonly cpuUnderProfilerMs: CpuPerGrant;
  readonly kinds: {
    readonly replicas: KindBreakdown;
    readonly resource: KindBreakdown;
    readonly client: KindBreakdown;
  };
}

/**
 * One fenced-write loop on fresh processes under --cpu-prof (the client, in
 * this process, through the inspector); each process kind's self time inside
 * the loop's window, per grant.
 */
export async function profileLoop(
  dir: string,
  n: number,
  signingWorkers: number | undefined,
  clients: number,
  seconds: number,
  unprofiledCpu: CpuPerGrant,
  progress: (line: string) => void,
): Promise<LoopProfile> {
  const profiles = join(dir, 'cpuprofiles');
  // 250 us between samples: a grant costs a few ms, so the default 1 ms would see little.
  const nodeArgs = (name: string) => [
    '--cpu-prof',
    '--cpu-prof-interval',
    '250',
    '--cpu-prof-dir',
    join(profiles, name),
  ];
  progress(`system: profiling ${clients} client(s), acquire + guarded write + release ...`);
  const { local, resource } = await startSystem(dir, n, signingWorkers, nodeArgs);
  const session = new Session();
  let clientProfile: CpuProfile;
  let loopRate: LoopRate;
  let window: { fromUs: number; toUs: number };
  let cpu: CpuPerGrant;
  try {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 250 });
    await session.post('Profiler.start');
    const pids = { replicas: local.replicas.map((r) => r.pid), resource: resource.pid };
    let fromUs = monotonicUs();
    let toUs = fromUs;
    let before = cpuNow(pids);
    let after = before;
    loopRate = await acquireLoop(
      await reach(local, resource, LOOPBACK),
      clients,
      seconds,
      freshNames('bench/profile'),
      true,
      {
        opened: () => {
          fromUs = monotonicUs();
          before = cpuNow(pids);
        },
        done: () => {
          after = cpuNow(pids);
          toUs = monotonicUs();
        },
      },
    );
    window = { fromUs, toUs };
    // The loop's warm-up grants (one per client) fall inside the window too.
    cpu = cpuPerGrant(before, after, loopRate.operations + clients);
    clientProfile = (await session.post('Profiler.stop')).profile as unknown as CpuProfile;
  } finally {
    session.disconnect();
    // A graceful stop: node writes each --cpu-prof file as its process (or thread) exits.
    await resource.stop();
    await local.close();
  }
  const grants = loopRate.operations + clients;
  const replicaProfiles = local.replicas.flatMap((r) => readProfiles(join(profiles, `replica-${r.index}`)));
  return {
    loop: loopRate,
    grants,
    cpuUnderProfilerMs: cpu,
    kinds: {
      replicas: breakdown(replicaProfiles, grants, { window, cpuMsPerGrant: unprofiledCpu.replicas }),
      resource: breakdown(readProfiles(join(profiles, 'resource')), grants, {
        window,
        cpuMsPerGrant: unprofiledCpu.resource,
      }),
      client: breakdown([clientProfile], grants, { window, cpuMsPerGrant: unprofiledCpu.client }),
    },
  };
}
