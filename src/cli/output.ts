/** Output helpers: JSON that keeps bigints exact, and human lines that never show a secret. */
import { redact } from '../core/logger.js';
import { writeOut } from '../core/stdio.js';

export function toJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
}

export function print(line: string): void {
  writeOut(1, `${redact(line)}\n`);
}

export function printError(line: string): void {
  writeOut(2, `${redact(line)}\n`);
}

export function formatCount(n: number): string {
  // Not toLocaleString: loading ICU's number formatting costs ~20 ms, a visible share of a no-op run.
  const [int, frac] = String(n).split('.');
  const grouped = int!.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return frac === undefined ? grouped : `${grouped}.${frac}`;
}
