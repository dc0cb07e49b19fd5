/**
 * A parser of the Prometheus text exposition format (version 0.0.4) for tests that scrape `/metrics`: `# HELP` and
 * `# TYPE` lines, and samples with escaped label values.
 */
export interface PromSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface PromScrape {
  readonly types: ReadonlyMap<string, string>;
  readonly help: ReadonlyMap<string, string>;
  readonly samples: readonly PromSample[];
  /** Samples of `name` whose labels include every one given. */
  find(name: string, labels?: Readonly<Record<string, string>>): PromSample[];
  /** The value of the one sample of `name` with these labels; undefined when there is none, an error when several. */
  value(name: string, labels?: Readonly<Record<string, string>>): number | undefined;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$/;

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const m = /^\s*([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(text.slice(i));
    if (!m) throw new Error(`bad labels in: ${line}`);
    i += m[0].length;
    let value = '';
    for (;;) {
      const c = text[i];
      if (c === undefined) throw new Error(`unterminated label value in: ${line}`);
      i += 1;
      if (c === '"') break;
      if (c === '\\') {
        const e = text[i];
        i += 1;
        value += e === 'n' ? '\n' : e;
      } else value += c;
    }
    labels[m[1]!] = value;
    const rest = /^\s*,?/.exec(text.slice(i))!;
    i += rest[0].length;
  }
  return labels;
}

function parseValue(text: string): number {
  if (text === '+Inf') return Number.POSITIVE_INFINITY;
  if (text === '-Inf') return Number.NEGATIVE_INFINITY;
  if (text === 'NaN') return Number.NaN;
  const n = Number(text);
  if (Number.isNaN(n)) throw new Error(`bad sample value ${text}`);
  return n;
}

export function parsePrometheus(text: string): PromScrape {
  const types = new Map<string, string>();
  const help = new Map<string, string>();
  const samples: PromSample[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const meta = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
    if (meta) {
      (meta[1] === 'TYPE' ? types : help).set(meta[2]!, meta[3]!);
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    samples.push({ name: m[1]!, labels: m[2] !== undefined ? parseLabels(m[2], line) : {}, value: parseValue(m[3]!) });
  }
  const find = (name: string, labels: Readonly<Record<string, string>> = {}) =>
    samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return {
    types,
    help,
    samples,
    find,
    value(name, labels = {}) {
      const found = find(name, labels);
      if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
      return found[0]?.value;
    },
  };
}
