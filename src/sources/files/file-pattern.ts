/**
 * File patterns: a glob relative to the location whose `{name}` captures define the partition.
 * `trips/yellow_tripdata_{month}.parquet`, `events/date={date}/*.jsonl`.
 */
import { ConfigError } from '../../core/errors.js';

export interface FilePattern {
  readonly source: string;
  /** Names of the `{…}` captures, in order. */
  readonly captures: readonly string[];
  /** Captures that fill a whole Hive-style directory of their own name (`month={month}/`). */
  readonly hiveKeys: readonly string[];
  /** The literal head of the pattern: only keys under it are listed. */
  readonly prefix: string;
  /** The partition a key belongs to, or undefined when the key does not match. */
  partitionOf(key: string): string | undefined;
}

const SPECIAL = /[\\^$.|+()[\]{}]/g;

export function compilePattern(pattern: string): FilePattern {
  const captures: string[] = [];
  let regex = '';
  let prefixEnd = -1;
  for (let i = 0; i < pattern.length; i += 1) {
    const ch = pattern[i]!;
    if (ch === '{') {
      const close = pattern.indexOf('}', i);
      const name = close < 0 ? '' : pattern.slice(i + 1, close);
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new ConfigError(`pattern ${JSON.stringify(pattern)}: expected {name} with a name of letters, digits and _`);
      if (captures.includes(name)) throw new ConfigError(`pattern ${JSON.stringify(pattern)}: capture {${name}} appears twice`);
      captures.push(name);
      regex += '([^/]+)';
      if (prefixEnd < 0) prefixEnd = i;
      i = close;
    } else if (ch === '*') {
      if (prefixEnd < 0) prefixEnd = i;
      if (pattern[i + 1] === '*') {
        i += 1;
        // `**/` is any number of whole directories (none included): `**/t_{m}.csv` matches `t_1.csv`, not `direct_1.csv`.
        if (pattern[i + 1] === '/') {
          regex += '(?:.*/)?';
          i += 1;
        } else regex += '.*';
      } else regex += '[^/]*';
    } else if (ch === '?') {
      if (prefixEnd < 0) prefixEnd = i;
      regex += '[^/]';
    } else regex += ch.replace(SPECIAL, '\\$&');
  }
  const compiled = new RegExp(`^${regex}$`);
  const prefix = prefixEnd < 0 ? pattern : pattern.slice(0, prefixEnd);
  const hiveKeys = captures.filter((c) => pattern.split('/').slice(0, -1).includes(`${c}={${c}}`));
  return {
    source: pattern,
    captures,
    hiveKeys,
    prefix,
    partitionOf(key: string): string | undefined {
      const m = compiled.exec(key);
      if (!m) return undefined;
      // Without captures, every file is its own partition.
      return captures.length === 0 ? key : m.slice(1).join('/');
    },
  };
}
