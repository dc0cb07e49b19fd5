/** Output helpers: JSON that keeps bigints exact, and human lines that never show a secret. */
import { formatLogLine, logFormat, redact, type LogFields, type LogLevel } from '../core/logger.js';
import { writeOut } from '../core/stdio.js';

/**
 * Every `--json` output: bigints exact, and keys in snake_case whatever the library's field names (`runId` →
 * `run_id`), so all commands speak one style. Names that are data stay as written: the stream names keying a state
 * document's `streams`, and a connector's opaque `resume` position.
 */
export function toJson(value: unknown): string {
  return JSON.stringify(snakeKeys(value), (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
}

const OPAQUE_KEYS: ReadonlySet<string> = new Set(['resume']);
const NAME_KEYED: ReadonlySet<string> = new Set(['streams', 'metadata']);

function snakeCase(key: string): string {
  return key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
}

function snakeKeys(value: unknown, keepNames = false): unknown {
  if (Array.isArray(value)) return value.map((v) => snakeKeys(v));
  if (value === null || typeof value !== 'object' || !isPlainObject(value)) return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, v]) => [keepNames ? key : snakeCase(key), OPAQUE_KEYS.has(key) ? v : snakeKeys(v, !keepNames && NAME_KEYED.has(key))]),
  );
}

function isPlainObject(value: object): boolean {
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === Object.prototype || prototype === null;
}

export function print(line: string): void {
  writeOut(1, `${redact(line)}\n`);
}

/**
 * A line for stderr. Under `--log-format json` it is one object whose level its prefix tells (`error:`,
 * `interrupted:` and `usage:` are errors, `warn:` and `warning:` warnings, anything else info).
 */
export function printError(line: string, fields?: LogFields, level?: LogLevel): void {
  if (logFormat() === 'text') return writeOut(2, `${redact(line)}\n`);
  const prefix = /^(\w+): /.exec(line)?.[1];
  level ??= prefix === 'error' || prefix === 'interrupted' || prefix === 'usage' ? 'error' : prefix === 'warn' || prefix === 'warning' ? 'warn' : 'info';
  writeOut(2, formatLogLine(level, prefix === 'error' || prefix === 'warn' ? line.slice(prefix.length + 2) : line, fields));
}

export function formatCount(n: number): string {
  // Not toLocaleString: loading ICU's number formatting costs ~20 ms, a visible share of a no-op run.
  const [int, frac] = String(n).split('.');
  const grouped = int!.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return frac === undefined ? grouped : `${grouped}.${frac}`;
}
