/**
 * Bad input from live sockets against a real replica process: fast-check
 * generates frames (truncated msgpack, wrong types, huge declared lengths,
 * deep nesting, oversized frames, unknown types, bad versions, extra fields,
 * text frames, random bytes, requests before authentication, replayed and
 * forged hellos, and well-formed requests from a holder the access rules
 * forbid everything). Each frame must get exactly its answer or close code,
 * as the protocol's own codec and the replica rules define it; the process
 * must stay healthy; no partial is ever sent; and the signing record must be
 * byte-for-byte the same before and after (compared through `replica export`).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import fc from 'fast-check';
import { Packr } from 'msgpackr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import type { LocalCluster } from '../../src/cluster/launcher.js';
import { DEFAULT_MAX_FRAME_BYTES, decodeClientMessage } from '../../src/protocol/codec.js';
import { CloseCode, type Challenge } from '../../src/protocol/messages.js';
import { startOneReplica, type OneReplica } from '../support/one-replica.js';
import { helloFor, newHolder, outcomeOf, RawClient, type Holder } from '../support/raw-client.js';

/**
 * The issue asks for at least 2,000 frames per run. Most bad frames end their
 * connection, so a run of 6 concurrent sessions sends ~6.5 frames; 400 runs send
 * about 2,600 (at least 2,000 is asserted below), whatever FC_NUM_RUNS says.
 */
const NUM_RUNS = 400;
const SESSIONS_PER_RUN = 6;
const MIN_FRAMES = 2_000;

const packr = new Packr({
  useRecords: false,
  mapsAsObjects: true,
  int64AsType: 'bigint',
  moreTypes: false,
  structuredClone: false,
  bundleStrings: false,
});
const pack = (value: unknown): Uint8Array => new Uint8Array(packr.pack(value));

let replica: OneReplica;
let local: LocalCluster;
let url: string;
let oldChallenge: Challenge;
const fuzzHolder: Holder = newHolder();
const controlHolder: Holder = newHolder();

function exportRecord(): string {
  return execFileSync(
    process.execPath,
    [join(process.cwd(), 'dist/nodes/quorumfence.js'), 'replica', 'export', '--data', local.replica(1).dataDir],
    {
      encoding: 'utf8',
    },
  );
}

beforeAll(async () => {
  // The fuzzing holder may touch no resource: whatever it sends, nothing may change.
  replica = await startOneReplica('qf-replica-fuzz', new Map([[fuzzHolder.publicKey, []]]));
  ({ local, url } = replica);
  const control = await RawClient.open(url, controlHolder);
  for (const resource of ['a', 'orders/1', 'ü'])
    expect(outcomeOf(await control.acquire(resource, 3n)).status).toBe('granted');
  oldChallenge = control.challenge;
  await control.close();
});

afterAll(async () => {
  await replica?.close();
});

// ---------- frame generators ----------

type FrameSpec =
  | { readonly kind: 'bytes'; readonly label: string; readonly bytes: Uint8Array }
  | { readonly kind: 'text'; readonly text: string }
  /** A hello signed over this connection's own challenge (valid when unauthenticated). */
  | { readonly kind: 'hello-valid' }
  /** A hello signed for a challenge of an earlier connection. */
  | { readonly kind: 'hello-replayed' }
  | { readonly kind: 'hello-forged'; readonly signature: Uint8Array };

const idArb = fc.oneof(fc.nat({ max: 0xffff_ffff }), fc.constant(0));
const resourceArb = fc.oneof(
  fc.constantFrom('a', 'orders/1', 'ü', '', 'x'.repeat(257)),
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 300 }),
);
const epochArb = fc.oneof(
  fc.bigInt({ min: -(1n << 63n), max: (1n << 64n) - 1n }),
  fc.integer({ min: -5, max: 5 }).map(BigInt),
);
const ttlArb = fc.oneof(fc.integer({ min: -1, max: 70_000 }), fc.constant(0x7fff_ffff), fc.constant(2 ** 31));

const requestObjectArb: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.record({
    v: fc.constant(1),
    type: fc.constantFrom('acquire', 'renew'),
    id: idArb,
    resource: resourceArb,
    epoch: epochArb,
    ttlMs: ttlArb,
  }),
  fc.record({ v: fc.constant(1), type: fc.constant('release'), id: idArb, resource: resourceArb, epoch: epochArb }),
  fc.record({ v: fc.constant(1), type: fc.constant('status'), id: idArb, resource: resourceArb }),
);
const wrongValueArb = fc.oneof(
  fc.string({ maxLength: 10 }),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.uint8Array({ maxLength: 70 }),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 3 }), fc.integer(), { maxKeys: 2 }),
);

const hugeHeaderArb = fc
  .record({
    header: fc.constantFrom(
      [0xdf, 0xff, 0xff, 0xff, 0xff], // map32
      [0xdd, 0xff, 0xff, 0xff, 0xff], // array32
      [0xdb, 0x7f, 0xff, 0xff, 0xff], // str32
      [0xc6, 0xff, 0xff, 0xff, 0xf0], // bin32
      [0xc9, 0x7f, 0xff, 0xff, 0xff, 0x01], // ext32
      [0xde, 0xff, 0xff], // map16
    ),
    inside: fc.boolean(),
    tail: fc.uint8Array({ maxLength: 16 }),
  })
  .map(({ header, inside, tail }) => {
    // Either the whole frame, or a huge length declared inside a plausible message map.
    const prefix = inside
      ? [
          0x83,
          0xa1,
          0x76,
          0x01,
          0xa4,
          0x74,
          0x79,
          0x70,
          0x65,
          0xa6,
          ...Buffer.from('status'),
          0xa8,
          ...Buffer.from('resource'),
        ]
      : [];
    return new Uint8Array([...prefix, ...header, ...tail]);
  });

const deepArb = fc.record({ depth: fc.integer({ min: 50, max: 12_000 }), map: fc.boolean() }).map(({ depth, map }) => {
  const unit = map ? [0x81, 0xa1, 0x6b] : [0x91];
  const out = new Uint8Array(depth * unit.length + 1);
  for (let k = 0; k < depth; k++) out.set(unit, k * unit.length);
  out[out.length - 1] = 0xc0;
  return out;
});

const frameArb: fc.Arbitrary<FrameSpec> = fc.oneof(
  { weight: 4, arbitrary: requestObjectArb.map((o) => ({ kind: 'bytes' as const, label: 'request', bytes: pack(o) })) },
  {
    weight: 3,
    arbitrary: requestObjectArb.chain((o) =>
      fc
        .nat({ max: pack(o).length - 1 })
        .map((cut) => ({ kind: 'bytes' as const, label: 'truncated', bytes: pack(o).subarray(0, cut) })),
    ),
  },
  {
    weight: 3,
    arbitrary: fc.tuple(requestObjectArb, fc.nat(), wrongValueArb).map(([o, k, value]) => {
      const keys = Object.keys(o);
      return { kind: 'bytes' as const, label: 'wrong-type', bytes: pack({ ...o, [keys[k % keys.length]!]: value }) };
    }),
  },
  { weight: 2, arbitrary: hugeHeaderArb.map((bytes) => ({ kind: 'bytes' as const, label: 'huge-length', bytes })) },
  { weight: 2, arbitrary: deepArb.map((bytes) => ({ kind: 'bytes' as const, label: 'deep-nesting', bytes })) },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: DEFAULT_MAX_FRAME_BYTES + 1, max: DEFAULT_MAX_FRAME_BYTES * 4 })
      .map((length) => ({ kind: 'bytes' as const, label: 'oversized', bytes: new Uint8Array(length).fill(0x91) })),
  },
  {
    weight: 2,
    arbitrary: fc
      .record({
        type: fc
          .string({ maxLength: 12 })
          .filter((t) => !['hello', 'acquire', 'renew', 'release', 'status'].includes(t)),
        id: idArb,
      })
      .map((o) => ({ kind: 'bytes' as const, label: 'unknown-type', bytes: pack({ v: 1, ...o }) })),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(
        requestObjectArb,
        fc.oneof(
          fc.integer().filter((v) => v !== 1),
          fc.string({ maxLength: 3 }),
        ),
      )
      .map(([o, v]) => ({ kind: 'bytes' as const, label: 'bad-version', bytes: pack({ ...o, v }) })),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(
        requestObjectArb,
        fc
          .string({ minLength: 1, maxLength: 8 })
          .filter((k) => !['v', 'type', 'id', 'resource', 'epoch', 'ttlMs'].includes(k)),
      )
      .map(([o, extra]) => ({ kind: 'bytes' as const, label: 'extra-field', bytes: pack({ ...o, [extra]: 1 }) })),
  },
  {
    weight: 2,
    arbitrary: fc.uint8Array({ maxLength: 200 }).map((bytes) => ({ kind: 'bytes' as const, label: 'random', bytes })),
  },
  { weight: 1, arbitrary: fc.string({ maxLength: 50 }).map((text) => ({ kind: 'text' as const, text })) },
  { weight: 1, arbitrary: fc.constant({ kind: 'hello-valid' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'hello-replayed' as const }) },
  {
    weight: 1,
    arbitrary: fc
      .uint8Array({ minLength: 64, maxLength: 64 })
      .map((signature) => ({ kind: 'hello-forged' as const, signature })),
  },
);

const sessionArb = fc.record({
  authenticated: fc.boolean(),
  frames: fc.array(frameArb, { minLength: 1, maxLength: 6 }),
});

// ---------- the oracle ----------

type Expected =
  | { readonly close: number }
  | { readonly reply: number }
  | { readonly unauthenticated: number | undefined }
  | { readonly welcome: number };

/** What the replica must do with `bytes` (or a text frame), given whether the connection is authenticated. */
function expectedFor(
  frame: { bytes?: Uint8Array; text?: string },
  authenticated: boolean,
  challenge: Challenge,
): Expected {
  if (frame.text !== undefined) return { close: CloseCode.UNSUPPORTED_DATA };
  const bytes = frame.bytes!;
  if (bytes.length > DEFAULT_MAX_FRAME_BYTES) return { close: CloseCode.MESSAGE_TOO_BIG };
  let message;
  try {
    message = decodeClientMessage(bytes);
  } catch {
    return { close: CloseCode.PROTOCOL_ERROR };
  }
  if (message.type === 'hello') {
    if (authenticated) return { close: CloseCode.PROTOCOL_ERROR };
    const valid =
      toHex(message.holder) === toHex(fuzzHolder.publicKey) &&
      toHex(message.signature) === toHex(helloFor(fuzzHolder, challenge).signature);
    return valid ? { welcome: message.id } : { close: CloseCode.POLICY_VIOLATION };
  }
  return authenticated ? { reply: message.id } : { unauthenticated: message.id };
}

function materialise(spec: FrameSpec, client: RawClient): { bytes?: Uint8Array; text?: string } {
  switch (spec.kind) {
    case 'bytes':
      return { bytes: spec.bytes };
    case 'text':
      return { text: spec.text };
    case 'hello-valid':
      return { bytes: pack({ v: 1, ...helloFor(fuzzHolder, client.challenge, 7) }) };
    case 'hello-replayed':
      return { bytes: pack({ v: 1, ...helloFor(fuzzHolder, oldChallenge, 7) }) };
    case 'hello-forged':
      return { bytes: pack({ v: 1, type: 'hello', id: 7, holder: fuzzHolder.publicKey, signature: spec.signature }) };
  }
}

let framesSent = 0;
const labels = new Map<string, number>();

async function runSession(session: { authenticated: boolean; frames: FrameSpec[] }): Promise<void> {
  const client = session.authenticated ? await RawClient.open(url, fuzzHolder) : await RawClient.connect(url);
  let authenticated = session.authenticated;
  try {
    for (const spec of session.frames) {
      const frame = materialise(spec, client);
      const expected = expectedFor(frame, authenticated, client.challenge);
      client.sendRaw(frame.text ?? frame.bytes!);
      framesSent++;
      const label = spec.kind === 'bytes' ? spec.label : spec.kind;
      labels.set(label, (labels.get(label) ?? 0) + 1);
      const event = await client.next();
      const context = `${label} frame (authenticated: ${authenticated}): ${toHex(frame.bytes ?? new Uint8Array()).slice(0, 120)}`;
      if ('close' in expected) {
        expect(event, context).toEqual({ closed: expect.objectContaining({ code: expected.close }) });
        return;
      }
      expect('message' in event, `${context} closed the connection: ${JSON.stringify(event)}`).toBe(true);
      const message = (event as { message: import('../../src/protocol/messages.js').ServerMessage }).message;
      if ('welcome' in expected) {
        expect(message, context).toEqual({ type: 'welcome', id: expected.welcome, replica: 1 });
        authenticated = true;
      } else if ('reply' in expected) {
        expect(message, context).toMatchObject({ type: 'reply', id: expected.reply });
        // The fuzzing holder may use nothing: every well-formed request is invalid or forbidden, never granted.
        expect(['invalid', 'forbidden'], context).toContain(
          (message as unknown as { outcome: { status: string } }).outcome.status,
        );
      } else {
        expect(message, context).toMatchObject({
          type: 'error',
          code: 'UNAUTHENTICATED',
          ...(expected.unauthenticated === undefined ? {} : { id: expected.unauthenticated }),
        });
        expect(await client.next(), context).toEqual({
          closed: expect.objectContaining({ code: CloseCode.POLICY_VIOLATION }),
        });
        return;
      }
    }
  } finally {
    await client.close();
  }
}

describe('wire: bad input from live sockets', () => {
  it(`answers every generated frame with its error or close code, stays up, and changes nothing (>= ${MIN_FRAMES} frames)`, async () => {
    const before = exportRecord();
    await fc.assert(
      fc.asyncProperty(
        fc.array(sessionArb, { minLength: SESSIONS_PER_RUN, maxLength: SESSIONS_PER_RUN }),
        async (sessions) => {
          await Promise.all(sessions.map(runSession));
          const health = await fetch(local.replica(1).healthUrl);
          expect(health.status).toBe(200);
        },
      ),
      { numRuns: NUM_RUNS },
    );
    expect(framesSent).toBeGreaterThanOrEqual(MIN_FRAMES);
    for (const label of [
      'request',
      'truncated',
      'wrong-type',
      'huge-length',
      'deep-nesting',
      'oversized',
      'unknown-type',
      'hello-replayed',
      'hello-forged',
      'text',
    ]) {
      expect(labels.get(label) ?? 0, label).toBeGreaterThan(20);
    }
    expect(exportRecord()).toBe(before);
    // And it still works for a permitted holder.
    const control = await RawClient.open(url, controlHolder);
    expect(outcomeOf(await control.acquire('a', 4n)).status).toBe('granted');
    await control.close();
  }, 180_000);
});
