/** A sortable id: UTC time to the millisecond, then randomness (`20261129T101500123Z-3f9a1c`). */
export function newRunId(now: Date = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('.', '');
  return `${stamp}-${randomHex(4)}`;
}

/**
 * Random hex for names that must not collide (run ids, temp files), not for secrets: V8 seeds each process's
 * Math.random from the OS, and node:crypto would cost ~4 ms of every run's start-up.
 */
export function randomHex(bytes: number): string {
  let hex = '';
  for (let i = 0; i < bytes; i += 1) hex += Math.floor(Math.random() * 256).toString(16).padStart(2, '0');
  return hex;
}
