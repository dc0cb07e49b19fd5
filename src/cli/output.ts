/** Output helpers: JSON that keeps bigints exact, and human lines that never show a secret. */
import { redact } from '../core/logger.js';

export function toJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
}

export function print(line: string): void {
  process.stdout.write(`${redact(line)}\n`);
}

export function printError(line: string): void {
  process.stderr.write(`${redact(line)}\n`);
}

export function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}
