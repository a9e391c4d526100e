/**
 * The etcd side of the bench, started for each run: a cluster of etcd members
 * on loopback, with fresh data directories and etcd's default durability
 * (fsync on every commit), and the one POST every call to its HTTP/JSON
 * gateway goes through.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { QuorumFenceError } from '../common/errors.js';
import { LOOPBACK, type Links } from './network.js';
// Type-only: undici is a dev dependency, loaded when the etcd section runs.
import type { Dispatcher } from 'undici';

export interface EtcdCluster {
  /** The URLs clients dial: the members' own, or routes to them. */
  readonly clientUrls: readonly string[];
  /** The members' process ids (for their CPU time). */
  readonly pids: readonly number[];
  /** Each member: its name, process, and the addresses it listens on (the bench's own calls, and its faults). */
  readonly members: readonly EtcdMember[];
  close(): Promise<void>;
}

export interface EtcdMember {
  /** etcd-1, etcd-2, ... */
  readonly name: string;
  /** Its member id (uint64, decimal, as etcd's JSON gives it). */
  readonly id: string;
  readonly pid: number;
  /** What clients dial (a route to the member with links, else its own address). */
  readonly clientUrl: string;
  /** Where it listens for clients: the bench's own calls (status, leadership) go here, around the network. */
  readonly listenClientUrl: string;
  /** Where it listens for its peers. */
  readonly listenPeerUrl: string;
}

/** The etcd binary on PATH, or undefined. */
export function findEtcd(): string | undefined {
  const result = spawnSync('sh', ['-c', 'command -v etcd'], { encoding: 'utf8' });
  const path = result.stdout.trim();
  return result.status === 0 && path ? path : undefined;
}

async function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** The fields of etcd gateway answers the bench reads. */
export interface EtcdAnswer {
  error?: unknown;
  ID?: string;
  key?: string;
  kvs?: { create_revision: string }[];
  succeeded?: boolean;
}

/** One POST to etcd's HTTP/JSON gateway through a keep-alive pool. */
export async function post(pool: Dispatcher, path: string, body: unknown, signal?: AbortSignal): Promise<EtcdAnswer> {
  const response = await pool.request({
    path,
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
    ...(signal ? { signal } : {}),
  });
  const json = (await response.body.json()) as EtcdAnswer;
  if (response.statusCode !== 200 || json.error)
    throw new QuorumFenceError(
      'INTERNAL',
      `etcd ${path}: ${response.statusCode} ${JSON.stringify(json).slice(0, 200)}`,
    );
  return json;
}

export const base64 = (text: string) => Buffer.from(text).toString('base64');

/**
 * Starts a 3-member etcd cluster on 127.0.0.1 and waits until it elects a leader. With `links`, each member
 * listens on its own ports and advertises routes to them, to its peers (so every Raft message crosses the
 * network, as between machines) and to clients.
 */
export async function startEtcdCluster(
  options: { members?: number; startTimeoutMs?: number; links?: Links } = {},
): Promise<EtcdCluster> {
  const links = options.links ?? LOOPBACK;
  const binary = findEtcd();
  if (!binary) throw new QuorumFenceError('IO_ERROR', 'etcd is not on PATH (Debian: apt-get install etcd-server)');
  const members = options.members ?? 3;
  const dir = mkdtempSync(join(tmpdir(), 'qf-bench-etcd-'));
  const host = '127.0.0.1';
  const ports = await Promise.all(Array.from({ length: members * 2 }, () => freePort(host)));
  const names = Array.from({ length: members }, (_, k) => `etcd-${k + 1}`);
  const peerUrls = names.map((_, k) => `http://${host}:${ports[2 * k + 1]}`);
  const listenUrls = names.map((_, k) => `http://${host}:${ports[2 * k]}`);
  const advertisedPeerUrls = await Promise.all(peerUrls.map((url) => links.route(url)));
  const clientUrls = await Promise.all(listenUrls.map((url) => links.route(url)));
  const initialCluster = names.map((name, k) => `${name}=${advertisedPeerUrls[k]}`).join(',');
  const children: ChildProcess[] = names.map((name, k) =>
    spawn(
      binary,
      [
        '--name',
        name,
        '--data-dir',
        join(dir, name),
        '--listen-client-urls',
        listenUrls[k]!,
        '--advertise-client-urls',
        clientUrls[k]!,
        '--listen-peer-urls',
        peerUrls[k]!,
        '--initial-advertise-peer-urls',
        advertisedPeerUrls[k]!,
        '--initial-cluster',
        initialCluster,
        '--initial-cluster-state',
        'new',
        '--initial-cluster-token',
        'quorumfence-bench',
        '--log-level',
        'error',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    ),
  );
  const close = async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', () => resolve());
            // The cluster and its data are thrown away, so there is nothing to stop gracefully for; and members
            // sent SIGTERM all at once keep one of them running for seconds (5 s measured here).
            child.kill('SIGKILL');
          }),
      ),
    );
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + (options.startTimeoutMs ?? 20_000);
  for (;;) {
    try {
      // A write goes through only once a leader exists.
      const { Pool } = await import('undici');
      const probe = new Pool(clientUrls[0]!, { connections: 1 });
      try {
        await post(probe, '/v3/kv/put', { key: base64('ready'), value: 'AQ==' }, AbortSignal.timeout(1000));
      } finally {
        await probe.close();
      }
      const members = await Promise.all(
        names.map(async (name, k) => ({
          name,
          id: (await memberStatus(listenUrls[k]!, name)).id,
          pid: children[k]!.pid ?? 0,
          clientUrl: clientUrls[k]!,
          listenClientUrl: listenUrls[k]!,
          listenPeerUrl: peerUrls[k]!,
        })),
      );
      return { clientUrls, pids: members.map((m) => m.pid), members, close };
    } catch (error) {
      if (Date.now() > deadline) {
        await close();
        throw new QuorumFenceError('TIMEOUT', `etcd cluster did not become ready: ${(error as Error).message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** A control call's bound: a member answers status in milliseconds; a stopped one never does. */
const CONTROL_TIMEOUT_MS = 2_000;

/** One POST to a member's gateway, outside the bench's pools (status and leadership calls). */
async function controlPost(url: string, path: string, body: unknown): Promise<Record<string, unknown>> {
  let response: Response;
  let json: Record<string, unknown>;
  try {
    response = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(CONTROL_TIMEOUT_MS),
    });
    json = (await response.json()) as Record<string, unknown>;
  } catch (error) {
    throw new QuorumFenceError('CONNECTION_FAILED', `etcd ${path} at ${url}: ${(error as Error).message}`, undefined, {
      cause: error,
    });
  }
  if (!response.ok || json.error)
    throw new QuorumFenceError('INTERNAL', `etcd ${path}: ${response.status} ${JSON.stringify(json).slice(0, 200)}`);
  return json;
}

/** The id of the member at `url` and of the leader it follows (etcd's maintenance Status; uint64s in decimal). */
async function memberStatus(url: string, name: string): Promise<{ id: string; leader: string }> {
  const status = await controlPost(url, '/v3/maintenance/status', {});
  const header = status.header as { member_id?: string } | undefined;
  if (!header?.member_id || typeof status.leader !== 'string')
    throw new QuorumFenceError('INTERNAL', `etcd status of ${name} names no member or leader`);
  return { id: header.member_id, leader: status.leader };
}

/**
 * The name of the member that every one of `members` outside `skip` follows; undefined while one of them
 * does not answer, they disagree, or they follow none (during an election).
 */
export async function agreedLeader(
  members: readonly EtcdMember[],
  skip: ReadonlySet<string> = new Set(),
): Promise<string | undefined> {
  const asked = members.filter((m) => !skip.has(m.name));
  const statuses = await Promise.all(asked.map((m) => memberStatus(m.listenClientUrl, m.name).catch(() => undefined)));
  const leaders = new Set(statuses.map((s) => s?.leader));
  if (leaders.size !== 1) return undefined;
  const [leader] = leaders;
  return members.find((m) => m.id === leader)?.name;
}

/**
 * Moves etcd's leadership to `target` through the maintenance API (MoveLeader, sent to the leader), and
 * waits until every member follows it. Resolves to whether a move was needed.
 * @throws QuorumFenceError TIMEOUT when the members do not all follow `target` within `timeoutMs`
 */
export async function moveLeader(
  members: readonly EtcdMember[],
  target: EtcdMember,
  timeoutMs = 15_000,
): Promise<{ moved: boolean }> {
  const deadline = Date.now() + timeoutMs;
  let moved = false;
  let last = '';
  for (;;) {
    const leader = await agreedLeader(members);
    if (leader === target.name) return { moved };
    if (Date.now() > deadline)
      throw new QuorumFenceError(
        'TIMEOUT',
        `etcd leadership did not move to ${target.name} within ${timeoutMs} ms (the members follow ${leader ?? 'no one member yet'}${last ? `; ${last}` : ''})`,
      );
    const current = leader === undefined ? undefined : members.find((m) => m.name === leader);
    if (current) {
      try {
        await controlPost(current.listenClientUrl, '/v3/maintenance/transfer-leadership', { targetID: target.id });
        moved = true;
      } catch (error) {
        // Leadership changed under the call, or an election is running: ask again.
        last = (error as Error).message;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
