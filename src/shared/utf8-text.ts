/**
 * UTF-8 decoding that never replaces silently. A byte that is not part of a valid UTF-8 sequence is kept as the lone
 * surrogate U+DC80–U+DCFF carrying its value (Python's "surrogateescape"), instead of becoming U+FFFD: the text stays
 * a lossless record of what was sent, and the value check (`coerceValue`) rejects it naming the column and the byte.
 */
import { isUtf8 } from 'node:buffer';

/** `bytes` as text; valid UTF-8 (the common case, checked natively) decodes as usual. */
export function decodeUtf8(bytes: Uint8Array): string {
  const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return isUtf8(buffer) ? buffer.toString('utf8') : decodeEscaped(buffer);
}

function decodeEscaped(buffer: Buffer): string {
  const parts: string[] = [];
  let runStart = 0;
  let i = 0;
  while (i < buffer.length) {
    const length = sequenceLength(buffer, i);
    if (length > 0) {
      i += length;
      continue;
    }
    if (i > runStart) parts.push(buffer.toString('utf8', runStart, i));
    parts.push(String.fromCharCode(0xdc00 + buffer[i]!));
    i += 1;
    runStart = i;
  }
  if (runStart < buffer.length) parts.push(buffer.toString('utf8', runStart));
  return parts.join('');
}

/** The length of the valid UTF-8 sequence starting at `at` (Unicode table 3-7), 0 when there is none. */
function sequenceLength(b: Buffer, at: number): number {
  const lead = b[at]!;
  if (lead < 0x80) return 1;
  const within = (k: number, lo: number, hi: number): boolean => at + k < b.length && b[at + k]! >= lo && b[at + k]! <= hi;
  if (lead >= 0xc2 && lead <= 0xdf) return within(1, 0x80, 0xbf) ? 2 : 0;
  if (lead >= 0xe0 && lead <= 0xef) {
    const [lo, hi] = lead === 0xe0 ? [0xa0, 0xbf] : lead === 0xed ? [0x80, 0x9f] : [0x80, 0xbf];
    return within(1, lo, hi) && within(2, 0x80, 0xbf) ? 3 : 0;
  }
  if (lead >= 0xf0 && lead <= 0xf4) {
    const [lo, hi] = lead === 0xf0 ? [0x90, 0xbf] : lead === 0xf4 ? [0x80, 0x8f] : [0x80, 0xbf];
    return within(1, lo, hi) && within(2, 0x80, 0xbf) && within(3, 0x80, 0xbf) ? 4 : 0;
  }
  return 0;
}
