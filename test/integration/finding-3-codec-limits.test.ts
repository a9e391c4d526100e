/**
 * Issue 16, finding 3: the codec accepted msgpackr's arbitrary-size BigInt
 * extension, and the `invalid` reply echoed the number in decimal (a 16 KB
 * request got a 39 KB reply and ~11.6 ms of the main thread); floats with an
 * integral value passed as integers, and invalid UTF-8 became U+FFFD. Now
 * only msgpack integers of at most 64 bits are accepted, every extension
 * type and every float is refused, strings must be well-formed UTF-8, and no
 * reply echoes a refused value. Checked from a live socket against a real
 * replica process: the answer is small, and the signing record is unchanged.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Packr } from 'msgpackr';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { concatBytes } from '../../src/common/bytes.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { decodeClientMessage } from '../../src/protocol/codec.js';
import { CloseCode } from '../../src/protocol/messages.js';
import { checkStrictMsgpack } from '../../src/protocol/strict-msgpack.js';
import { codeOf } from '../support/error-code.js';
import { outcomeOf, RawClient } from '../support/raw-client.js';

// ---------- hand-built msgpack: the shapes a friendly encoder would never produce ----------

const utf8 = new TextEncoder();
const str = (text: string): Uint8Array => rawStr(utf8.encode(text));
function rawStr(bytes: Uint8Array): Uint8Array {
  if (bytes.length < 32) return concatBytes(Uint8Array.of(0xa0 | bytes.length), bytes);
  return concatBytes(Uint8Array.of(0xda, bytes.length >> 8, bytes.length & 0xff), bytes);
}
const uint = (n: number): Uint8Array => (n < 128 ? Uint8Array.of(n) : Uint8Array.of(0xcd, n >> 8, n & 0xff));
function f64(x: number): Uint8Array {
  const out = new Uint8Array(9);
  out[0] = 0xcb;
  new DataView(out.buffer).setFloat64(1, x);
  return out;
}
function f32(x: number): Uint8Array {
  const out = new Uint8Array(5);
  out[0] = 0xca;
  new DataView(out.buffer).setFloat32(1, x);
  return out;
}
const u64max = Uint8Array.of(0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff);
/** A fixmap of pre-encoded values. */
function map(entries: readonly (readonly [string, Uint8Array])[]): Uint8Array {
  return concatBytes(Uint8Array.of(0x80 | entries.length), ...entries.flatMap(([k, v]) => [str(k), v]));
}
function acquire(fields: { resource?: Uint8Array; epoch?: Uint8Array; ttlMs?: Uint8Array; id?: number }): Uint8Array {
  return map([
    ['v', uint(1)],
    ['type', str('acquire')],
    ['id', uint(fields.id ?? 7)],
    ['resource', fields.resource ?? str('finding3')],
    ['epoch', fields.epoch ?? uint(1)],
    ['ttlMs', fields.ttlMs ?? uint(1000)],
  ]);
}

/** What the reviewer sent: an epoch in msgpackr's BigInt extension, about 16 KB of digits. */
const bigIntPackr = new Packr({ useRecords: false, useBigIntExtension: true });
const hugeEpochFrame = new Uint8Array(
  bigIntPackr.pack({ v: 1, type: 'acquire', id: 7, resource: 'finding3', epoch: 1n << (8n * 15_000n), ttlMs: 1000 }),
);

const refusedFrames: readonly { readonly label: string; readonly frame: Uint8Array }[] = [
  { label: 'an epoch in the BigInt extension (~16 KB)', frame: hugeEpochFrame },
  { label: 'a float64 epoch with an integral value', frame: acquire({ epoch: f64(5) }) },
  { label: 'a float32 ttl with an integral value', frame: acquire({ ttlMs: f32(1000) }) },
  {
    label: 'a float id',
    frame: map([
      ['v', uint(1)],
      ['type', str('status')],
      ['id', f64(1)],
      ['resource', str('finding3')],
    ]),
  },
  { label: 'a resource of invalid UTF-8', frame: acquire({ resource: rawStr(Uint8Array.of(0x66, 0xff, 0xfe)) }) },
  {
    label: 'a resource with a lone surrogate (CESU bytes)',
    frame: acquire({ resource: rawStr(Uint8Array.of(0xed, 0xa0, 0x80)) }),
  },
  {
    label: 'a timestamp extension (fixext 4, type -1)',
    frame: acquire({ epoch: Uint8Array.of(0xd6, 0xff, 0, 0, 0, 1) }),
  },
  { label: 'an ext8 of an unknown type', frame: acquire({ epoch: Uint8Array.of(0xc7, 1, 0x42, 0x01) }) },
  { label: 'the reserved byte 0xc1', frame: acquire({ epoch: Uint8Array.of(0xc1) }) },
  { label: 'a map claiming more entries than the frame holds', frame: Uint8Array.of(0xdf, 0xff, 0xff, 0xff, 0xff) },
  { label: 'trailing bytes', frame: concatBytes(acquire({}), Uint8Array.of(0xc0)) },
];

describe('finding 3: only 64-bit integers, no extensions, no floats, strict UTF-8, no echo', () => {
  test.each(refusedFrames)('the codec refuses $label with PROTOCOL_ERROR', ({ frame }) => {
    expect(codeOf(() => checkStrictMsgpack(frame))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => decodeClientMessage(frame, 1 << 20))).toBe('PROTOCOL_ERROR');
  });

  test('the codec accepts every integer width up to 64 bits, and the protocol subset', () => {
    expect(decodeClientMessage(acquire({ epoch: u64max }))).toMatchObject({ epoch: (1n << 64n) - 1n });
    const int64min = Uint8Array.of(0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0);
    expect(decodeClientMessage(acquire({ epoch: int64min }))).toMatchObject({ epoch: -(1n << 63n) });
    expect(decodeClientMessage(acquire({ resource: str('ü/😀') }))).toMatchObject({ resource: 'ü/😀' });
  });

  describe('from a live socket', () => {
    let root: string;
    let local: LocalCluster;
    let url: string;
    const exportRecord = (): string =>
      execFileSync(
        process.execPath,
        [join(process.cwd(), 'dist/nodes/quorumfence.js'), 'replica', 'export', '--data', local.replica(1).dataDir],
        { encoding: 'utf8' },
      );

    beforeAll(async () => {
      root = mkdtempSync(join(tmpdir(), 'qf-finding3-'));
      dealLocalCluster(join(root, 'keys'));
      local = await startLocalCluster({
        newStores: true,
        dir: join(root, 'keys'),
        indices: [1],
        dataRoot: join(root, 'data'),
      });
      url = local.replica(1).url;
      const control = await RawClient.open(url);
      expect(outcomeOf(await control.acquire('finding3', 3n)).status).toBe('granted');
      await control.close();
    });
    afterAll(async () => {
      await local?.close();
      rmSync(root, { recursive: true, force: true });
    });

    test.each(refusedFrames)(
      '$label: the connection closes with 1002, a short reason, nothing else sent, record unchanged',
      async ({ frame }) => {
        const before = exportRecord();
        const client = await RawClient.open(url);
        let received = 0;
        client.socket.on('message', (data: Buffer) => (received += data.length));
        client.sendRaw(frame);
        const closed = await client.closed;
        // A frame over 16 KiB is refused by size (1009) before the codec sees it; both refuse without echo.
        expect([CloseCode.PROTOCOL_ERROR, CloseCode.MESSAGE_TOO_BIG]).toContain(closed.code);
        expect(Buffer.byteLength(closed.reason)).toBeLessThanOrEqual(123);
        expect(received).toBe(0);
        expect(exportRecord()).toBe(before);
      },
    );

    test('an epoch at the 64-bit limit is refused by the policy with a reply that does not echo it', async () => {
      const before = exportRecord();
      const client = await RawClient.open(url);
      const replies: Buffer[] = [];
      client.socket.on('message', (data: Buffer) => replies.push(data));
      const answer = await client.acquire('finding3', (1n << 64n) - 1n);
      const outcome = outcomeOf(answer);
      expect(outcome.status).toBe('invalid');
      expect(JSON.stringify(outcome)).not.toContain('18446744073709551615');
      expect(Math.max(...replies.map((r) => r.length))).toBeLessThan(200);
      await client.close();
      expect(exportRecord()).toBe(before);
    });

    test('the BigInt-extension frame at the 16 KiB limit costs little and answers small', async () => {
      const frame = new Uint8Array(
        bigIntPackr.pack({
          v: 1,
          type: 'acquire',
          id: 7,
          resource: 'finding3',
          epoch: 1n << (8n * 16_200n),
          ttlMs: 1000,
        }),
      );
      expect(frame.length).toBeLessThanOrEqual(16 * 1024);
      const client = await RawClient.open(url);
      let received = 0;
      client.socket.on('message', (data: Buffer) => (received += data.length));
      client.sendRaw(frame);
      expect((await client.closed).code).toBe(CloseCode.PROTOCOL_ERROR);
      expect(received).toBe(0);
    });
  });
});
