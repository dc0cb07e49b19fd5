import { randomBytes } from 'node:crypto';

/** A sortable id: UTC time to the millisecond, then randomness (`20261129T101500123Z-3f9a1c`). */
export function newRunId(now: Date = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('.', '');
  return `${stamp}-${randomBytes(4).toString('hex')}`;
}
