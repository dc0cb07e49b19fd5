import { writeSync } from 'node:fs';

/**
 * Writes to stdout (1) or stderr (2) straight through the file descriptor. `process.stdout` first builds a stream
 * and loads Node's stream modules (~2 ms of a no-op run's ~80); on Linux it writes files, pipes and terminals
 * synchronously anyway, so the output and its order are the same. A descriptor left non-blocking by the parent
 * (EAGAIN) gets the rest through the stream; a reader that went away (EPIPE) gets nothing more.
 */
export function writeOut(fd: 1 | 2, text: string): void {
  const bytes = Buffer.from(text);
  let offset = 0;
  try {
    while (offset < bytes.length) offset += writeSync(fd, bytes, offset);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EPIPE') return;
    if (code !== 'EAGAIN') throw error;
    (fd === 1 ? process.stdout : process.stderr).write(bytes.subarray(offset));
  }
}
