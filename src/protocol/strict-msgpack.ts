/**
 * The subset of msgpack the protocol speaks, checked on the raw bytes before
 * msgpackr decodes them. msgpackr is generous: it decodes its own extensions
 * (an arbitrary-size BigInt among them, whose decimal echo amplified work and
 * replies), floats, and invalid UTF-8 (as U+FFFD). The protocol needs none of
 * that, so a frame is refused unless every value in it is one of:
 *
 *   nil, true, false
 *   an integer of at most 64 bits (fixint, uint8..uint64, int8..int64)
 *   a string of well-formed UTF-8 (fixstr, str8, str16, str32)
 *   bytes (bin8, bin16, bin32)
 *   an array or a map of those
 *
 * Refused: every extension type (fixext 1..16, ext8/16/32: msgpackr's BigInt,
 * timestamps, records, anything), float32 and float64 (even integral ones:
 * an epoch is never 1.0), the reserved byte 0xc1, a length or count that
 * runs past the frame, and trailing bytes. Error messages name the kind and
 * the offset, never the value.
 */
import { QuorumFenceError } from '../common/errors.js';

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function refuse(message: string, offset: number): never {
  throw new QuorumFenceError('PROTOCOL_ERROR', `msgpack: ${message} at byte ${offset}`);
}

/**
 * Walks one msgpack value (and everything inside it) covering exactly `frame`.
 * Iterative, so nesting depth costs no stack; every step consumes at least one
 * byte, so the walk is linear in the frame size.
 * @throws QuorumFenceError PROTOCOL_ERROR
 */
export function checkStrictMsgpack(frame: Uint8Array): void {
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  const length = frame.length;
  let offset = 0;
  /** Values still to read; each takes at least one byte, so more than the bytes left is a lie. */
  let pending = 1;

  const need = (bytes: number, at: number): void => {
    if (offset + bytes > length) refuse('truncated value', at);
  };
  const skipString = (bytes: number, at: number): void => {
    need(bytes, at);
    const end = offset + bytes;
    let ascii = true;
    for (let i = offset; i < end && ascii; i++) ascii = frame[i]! < 0x80;
    // Field names and most resources are ASCII, always valid; only other strings need the strict decoder.
    if (!ascii) {
      try {
        strictUtf8.decode(frame.subarray(offset, end));
      } catch {
        refuse('string is not well-formed UTF-8', at);
      }
    }
    offset = end;
  };
  const skipBytes = (bytes: number, at: number): void => {
    need(bytes, at);
    offset += bytes;
  };
  const addItems = (count: number, at: number): void => {
    pending += count;
    if (pending > length - offset) refuse('array or map claims more entries than the frame holds', at);
  };

  while (pending > 0) {
    const at = offset;
    need(1, at);
    const type = frame[offset++]!;
    pending--;
    if (type <= 0x7f || type >= 0xe0) continue; // positive and negative fixint
    if (type <= 0x8f) {
      addItems(2 * (type & 0x0f), at); // fixmap
      continue;
    }
    if (type <= 0x9f) {
      addItems(type & 0x0f, at); // fixarray
      continue;
    }
    if (type <= 0xbf) {
      skipString(type & 0x1f, at); // fixstr
      continue;
    }
    switch (type) {
      case 0xc0: // nil
      case 0xc2: // false
      case 0xc3: // true
        break;
      case 0xc4: // bin8
        need(1, at);
        skipBytes(view.getUint8(offset++), at);
        break;
      case 0xc5: // bin16
        need(2, at);
        offset += 2;
        skipBytes(view.getUint16(offset - 2), at);
        break;
      case 0xc6: // bin32
        need(4, at);
        offset += 4;
        skipBytes(view.getUint32(offset - 4), at);
        break;
      case 0xcc: // uint8
      case 0xd0: // int8
        skipBytes(1, at);
        break;
      case 0xcd: // uint16
      case 0xd1: // int16
        skipBytes(2, at);
        break;
      case 0xce: // uint32
      case 0xd2: // int32
        skipBytes(4, at);
        break;
      case 0xcf: // uint64
      case 0xd3: // int64
        skipBytes(8, at);
        break;
      case 0xd9: // str8
        need(1, at);
        skipString(view.getUint8(offset++), at);
        break;
      case 0xda: // str16
        need(2, at);
        offset += 2;
        skipString(view.getUint16(offset - 2), at);
        break;
      case 0xdb: // str32
        need(4, at);
        offset += 4;
        skipString(view.getUint32(offset - 4), at);
        break;
      case 0xdc: // array16
        need(2, at);
        offset += 2;
        addItems(view.getUint16(offset - 2), at);
        break;
      case 0xdd: // array32
        need(4, at);
        offset += 4;
        addItems(view.getUint32(offset - 4), at);
        break;
      case 0xde: // map16
        need(2, at);
        offset += 2;
        addItems(2 * view.getUint16(offset - 2), at);
        break;
      case 0xdf: // map32
        need(4, at);
        offset += 4;
        addItems(2 * view.getUint32(offset - 4), at);
        break;
      case 0xca:
      case 0xcb:
        return refuse('floats are not part of the protocol (integers only)', at);
      default:
        // 0xc1 (never used), 0xc7..0xc9 (ext8/16/32), 0xd4..0xd8 (fixext): no extension is part of the protocol.
        return refuse(type === 0xc1 ? 'reserved type byte 0xc1' : 'extension types are not part of the protocol', at);
    }
  }
  if (offset !== length) refuse(`${length - offset} trailing bytes after the message`, offset);
}
