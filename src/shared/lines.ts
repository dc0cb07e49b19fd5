/** Line-delimited message streams (Singer and Airbyte stdout, stdin of a target), read in bounded memory. */
import { SourceError } from '../core/errors.js';
import { decodeUtf8 } from './utf8-text.js';

/** A single message larger than this is refused instead of buffered without bound. */
export const MAX_LINE_BYTES = 64 * 1024 * 1024;

/**
 * Splits a byte stream into lines; memory stays at one chunk plus one line. The protocols say UTF-8: bytes that are
 * not are kept (see decodeUtf8) for the value check to reject, never replaced.
 */
export async function* readLines(input: AsyncIterable<Buffer | string>, what: string): AsyncGenerator<string> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  for await (const chunk of input) {
    let buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    let newline = buffer.indexOf(0x0a);
    while (newline >= 0) {
      const head = buffer.subarray(0, newline);
      const line = decodeUtf8(pending.length ? Buffer.concat([...pending, head]) : head);
      pending = [];
      pendingBytes = 0;
      yield line.endsWith('\r') ? line.slice(0, -1) : line;
      buffer = buffer.subarray(newline + 1);
      newline = buffer.indexOf(0x0a);
    }
    if (buffer.length) {
      pendingBytes += buffer.length;
      if (pendingBytes > MAX_LINE_BYTES) throw new SourceError(`${what} wrote a line longer than ${MAX_LINE_BYTES} bytes`, { context: { phase: 'extract' } });
      pending.push(Buffer.from(buffer));
    }
  }
  if (pendingBytes) yield decodeUtf8(Buffer.concat(pending));
}
