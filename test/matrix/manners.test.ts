/**
 * The conformance matrix's "manners" dimension: sources that misbehave as real APIs, taps and code sources do (a
 * group of records sharing one cursor value larger than a page, served in a stable or a changing order; an API that
 * ignores its window filter; records out of cursor order, a STATE that is not safe and then a crash, a STATE sent before its records, a key sent twice in
 * one read, a catalog without the key and with fewer fields than the tap's SCHEMA, a tap that never sends a STATE, a
 * source that promises an order and breaks it) × destinations (duckdb, sqlite, postgres, lake dir) × writes, over
 * 2,600 records, five STATEs and several checkpoints. Each cell ends exact (the matrix's oracle: destination =
 * source, no key twice, every run's rows accounted for, a run with nothing new loads nothing), or is refused with a
 * clear message and nothing wrong committed (what did commit is a subset of the source, no key twice).
 *
 * `npm test` runs a seeded sample of `TIDEMARK_MATRIX_MANNERS_CELLS` cells (default 3, under a minute two at a time);
 * `TIDEMARK_MATRIX=all` runs every cell; `TIDEMARK_MATRIX_SEED`, `TIDEMARK_MATRIX_ONLY=<regex>` and
 * `TIDEMARK_MATRIX_CONCURRENCY` work as in matrix.test.ts.
 */
import { appendFile, mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { cli, type CliResult } from '../helpers/cli.js';
import { tempDir } from '../helpers/fs.js';
import { airbyte } from '../e2e/airbyte/helpers.js';
import { lakeDirDestination } from './destinations/lake.js';
import { duckdbDestination, sqliteDestination } from './destinations/embedded.js';
import { postgresDestination } from './destinations/postgres.js';
import { changedRows, fixtureRows, STREAM, toCanonical, type Canonical, type FixtureRow } from './fixture.js';
import { checkRows, checkRunJson, OracleError, type RunJson } from './oracle.js';
import { endPg } from './pg.js';
import { mannersApiYaml, startMannersApi, type MannersApi, type MannersApiOptions } from './sources/http-manners.js';
import { yamlList } from './sources/table-source.js';
import { WRITES, type DestinationAdapter, type DestinationInstance, type Write } from './types.js';
import { cellSlots } from './slots.js';

const TAP = fileURLToPath(new URL('./sources/tap-manners.mjs', import.meta.url));
const LIBRARY = new URL('../../dist/index.js', import.meta.url).href;
const ROWS = 2_600;
const STATE_EVERY = 500;
const CRASH_AFTER = 1_700;

/** How a cell goes: runs with a change between them, a crash then healthy runs, or a refusal. */
type Scenario = 'change' | 'crash' | 'refuse' | 'syncs';

interface Manner {
  readonly name: string;
  /** The scenario, or one per write (an order broken matters to incremental reads, not to a full rebuild). */
  readonly scenario: Scenario | ((write: Write) => Scenario);
  /** The misbehaving source's part of the pipeline file (a crash scenario's first run has `crashing` set). */
  source(files: SourceFiles, write: Write, crashing: boolean): string;
  /** The message a crash or refusal must carry. */
  readonly message?: RegExp;
  /** An HTTP manner's API, serving the cell's rows. */
  readonly api?: MannersApiOptions;
  /** The rows the source starts with, when not the plain fixture. */
  readonly initial?: () => FixtureRow[];
  /** An Airbyte platform's syncs into `tidemark airbyte-destination write`: the message lines of each, in order. */
  readonly syncs?: (data: SourceData) => Promise<string[][]>;
  /** How `airbyte-destination` refuses a write the destination cannot do (its own words, not `tidemark run`'s). */
  readonly refusal?: RegExp;
  /** Writes this manner does not apply to, with the reason. */
  readonly skip?: (write: Write) => string | undefined;
}

interface SourceFiles {
  readonly data: string;
  readonly module: string;
  /** The misbehaving API of an HTTP manner. */
  readonly api?: MannersApi;
}

const tapLine = (r: FixtureRow) =>
  `{"id":${r.id},"updated_at":"${r.updated_at.replace(' ', 'T')}Z","big":${r.big},"amount":${JSON.stringify(r.amount)},"note":${JSON.stringify(r.note)}}`;

const streamYaml = (write: Write, extra: Record<string, unknown> = {}) =>
  yamlList({ name: STREAM, ...(write === 'full' ? { strategy: 'full' } : { write }), checkpoint_rows: STATE_EVERY, ...extra });

function singer(name: string, scenario: Scenario, knobs: Record<string, unknown>, options: { catalog?: boolean; message?: RegExp; keyless?: boolean } = {}): Manner {
  // A catalog as users write one for stream selection: no table-key-properties, two of the SCHEMA's five fields.
  const catalog = { streams: [{ tap_stream_id: STREAM, stream: STREAM, schema: { type: 'object', properties: { id: { type: 'integer' }, updated_at: { type: 'string', format: 'date-time' } } }, metadata: [{ breadcrumb: [], metadata: { selected: true } }] }] };
  return {
    name,
    scenario,
    ...(options.message ? { message: options.message } : {}),
    source: (files, write, crashing) =>
      [
        'source:',
        '  type: singer',
        `  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}]`,
        `  config: ${JSON.stringify({ data: files.data, state_every: STATE_EVERY, ...knobs, ...(crashing ? { crash_after: CRASH_AFTER } : {}) })}`,
        ...(options.catalog ? [`  catalog: ${JSON.stringify(catalog)}`] : []),
        'streams:',
        // The key comes from the tap's SCHEMA (key_properties) where the stream and the catalog leave it out.
        streamYaml(write, options.catalog ? {} : { primary_key: 'id' }),
      ].join('\n'),
  };
}

/** A code source that claims `ordered` and yields its pages out of cursor order. */
const codeUnsorted: Manner = {
  name: 'code-claims-order-unsorted',
  scenario: (write) => (write === 'full' ? 'change' : 'refuse'),
  message: /declared ordered, but a record with updated_at \S+ came after one with \S+; nothing after the last commit was written/,
  source: (files, write) => ['source:', '  type: code', `  module: ${JSON.stringify(files.module)}`, '  export: source', 'streams:', streamYaml(write)].join('\n'),
};

function codeModule(data: string): string {
  return `import { readFileSync } from 'node:fs';
import { codeSource, defineStream } from ${JSON.stringify(LIBRARY)};
export const source = codeSource({ streams: [defineStream({
  name: 'items', primaryKey: 'id', cursor: 'updated_at', ordered: true,
  columns: { id: 'int64', updated_at: 'timestamptz', big: 'int64', amount: 'decimal(38,6)', note: 'text' },
  async *read() {
    // Numbers as text: big is beyond 2^53.
    const rows = readFileSync(${JSON.stringify(data)}, 'utf8').split('\\n').filter(Boolean).map((l) => JSON.parse(l.replace(/"(id|big)":(\\d+)/g, '"$1":"$2"')));
    // Sorted, except that each page of 250 is sent after the next one.
    for (let page = 0; page * 250 < rows.length; page += 1) {
      const swapped = (page ^ 1) * 250 < rows.length ? page ^ 1 : page;
      yield rows.slice(swapped * 250, swapped * 250 + 250);
    }
  },
})] });
`;
}

/** The fixture with ids 301..900 sharing one cursor value: a tie group of 600 records, more than two pages. */
function bigTieGroup(): FixtureRow[] {
  const rows = fixtureRows(1, ROWS, { wideDecimals: true });
  const tied = rows[300]!.updated_at;
  return rows.map((r) => (r.id > 300n && r.id <= 900n ? { ...r, updated_at: tied } : r));
}

function http(name: string, api: MannersApiOptions, initial?: () => FixtureRow[]): Manner {
  return {
    name,
    scenario: 'change',
    api,
    ...(initial ? { initial } : {}),
    source: (files, write) => mannersApiYaml(files.api!, api, { name: STREAM, ...(write === 'full' ? { strategy: 'full' } : { write }), checkpoint_rows: STATE_EVERY }),
  };
}

const AIRBYTE_SCHEMA = {
  type: 'object',
  properties: { id: { type: 'integer' }, updated_at: { type: 'string', format: 'date-time', airbyte_type: 'timestamp_with_timezone' }, big: { type: 'integer' }, amount: { type: 'string' }, note: { type: ['null', 'string'] } },
};
const DESTINATION_SYNC_MODE: Record<Write, string> = { append: 'append', merge: 'append_dedup', full: 'overwrite' };

/** The configured catalog a platform hands the destination: one stream, incremental unless `fullRefresh`. */
function airbyteCatalog(write: Write, fullRefresh: boolean): string {
  const incremental = !fullRefresh && write !== 'full';
  return JSON.stringify({
    streams: [
      {
        stream: { name: STREAM, json_schema: AIRBYTE_SCHEMA, supported_sync_modes: ['full_refresh', 'incremental'] },
        sync_mode: incremental ? 'incremental' : 'full_refresh',
        destination_sync_mode: DESTINATION_SYNC_MODE[write],
        primary_key: [['id']],
        ...(incremental ? { cursor_field: ['updated_at'] } : {}),
      },
    ],
  });
}

const airbyteRecord = (r: FixtureRow) => `{"type":"RECORD","record":{"stream":"${STREAM}","data":${tapLine(r)},"emitted_at":1700000000000}}`;
const airbyteState = (cursor: string) => JSON.stringify({ type: 'STATE', state: { type: 'STREAM', stream: { stream_descriptor: { name: STREAM }, stream_state: { updated_at: cursor } } } });

/** A source's sync: records in cursor order from `since` (inclusive, as `>=` sources re-read), a STATE every 500. */
function airbyteSync(rows: readonly FixtureRow[], since: string | undefined, withState: boolean): string[] {
  const sorted = rows.filter((r) => since === undefined || r.updated_at >= since).sort((a, b) => (a.updated_at === b.updated_at ? Number(a.id - b.id) : a.updated_at < b.updated_at ? -1 : 1));
  const lines: string[] = [];
  sorted.forEach((r, i) => {
    lines.push(airbyteRecord(r));
    if (withState && ((i + 1) % STATE_EVERY === 0 || i === sorted.length - 1)) lines.push(airbyteState(`${r.updated_at.replace(' ', 'T')}Z`));
  });
  return lines;
}

const newest = (rows: readonly FixtureRow[]) => rows.reduce((m, r) => (r.updated_at > m ? r.updated_at : m), '');

/** Airbyte's platform retrying a sync from an older STATE after it ended cleanly, then a `>=` source's next sync. */
const airbyteResend: Manner = {
  name: 'airbyte-destination-resend-older-state',
  scenario: 'syncs',
  source: () => '',
  refusal: /destination_sync_mode append_dedup needs write merge, which a files destination does not do/,
  skip: (write) => (write === 'full' ? 'an overwrite sync replaces the table; a re-sent one replaces it again' : undefined),
  syncs: async (data) => {
    const first = airbyteSync(data.rows(), undefined, true);
    // The retry starts after the second STATE of the first sync and sends the rest again, STATEs included.
    const second = first.slice(first.findIndex((l, i) => l.startsWith('{"type":"STATE"') && first.slice(0, i + 1).filter((x) => x.startsWith('{"type":"STATE"')).length === 2) + 1);
    const top = newest(data.rows());
    const { updates, inserts } = changedRows(data.rows(), true);
    await data.write([...updates, ...inserts]);
    return [first, second, airbyteSync(data.rows(), top, true)];
  },
};

/** A full-refresh stream whose connector sends no STATE at all (older CDKs). */
const airbyteNoState: Manner = {
  name: 'airbyte-destination-stream-without-state',
  scenario: 'syncs',
  source: () => '',
  refusal: /destination_sync_mode append_dedup needs write merge, which a files destination does not do/,
  skip: (write) => (write === 'append' ? 'a full refresh appended is every record again on every sync, by design' : undefined),
  syncs: async (data) => {
    const first = airbyteSync(data.rows(), undefined, false);
    const { updates, inserts } = changedRows(data.rows(), true);
    await data.write([...updates, ...inserts]);
    return [first, airbyteSync(data.rows(), undefined, false)];
  },
};

const MANNERS: readonly Manner[] = [
  airbyteResend,
  airbyteNoState,
  http('http-tie-group-stable', { pagination: 'page' }, bigTieGroup),
  http('http-tie-group-unstable', { pagination: 'page', unstableTies: true }, bigTieGroup),
  http('http-ignores-filter', { pagination: 'link', ignoreFilter: true }),
  singer('singer-unsorted', 'change', { order: 'shuffled', bookmark: 'max' }),
  singer('singer-unsafe-state-crash', 'crash', { order: 'shuffled', bookmark: 'max' }, { message: /exited with code 1|connection dropped/ }),
  singer('singer-state-before-records-crash', 'crash', { order: 'sorted', state_early: true }, { message: /exited with code 1|connection dropped/ }),
  singer('singer-duplicate-keys', 'change', { order: 'sorted', duplicate_every: 97 }),
  singer('singer-catalog-without-key', 'change', { order: 'sorted' }, { catalog: true }),
  singer('singer-no-state', 'change', { order: 'sorted', no_state: true }),
  codeUnsorted,
];
const DESTINATIONS: readonly DestinationAdapter[] = [duckdbDestination, sqliteDestination, postgresDestination, lakeDirDestination];

interface MannerCell {
  readonly manner: Manner;
  readonly destination: DestinationAdapter;
  readonly write: Write;
}
const cellName = (c: MannerCell) => `${c.manner.name} → ${c.destination.name} · ${c.write}`;

const ALL = process.env.TIDEMARK_MATRIX === 'all';
const SEED = Number(process.env.TIDEMARK_MATRIX_SEED ?? 2);
const SAMPLE = Number(process.env.TIDEMARK_MATRIX_MANNERS_CELLS ?? 3);
const ONLY = process.env.TIDEMARK_MATRIX_ONLY;
const CONCURRENCY = Number(process.env.TIDEMARK_MATRIX_CONCURRENCY ?? 2);
/** Appends one line per finished cell (vitest prints only at the end of a long run). */
const LOG = process.env.TIDEMARK_MATRIX_LOG;

function cells(): MannerCell[] {
  const all: MannerCell[] = [];
  for (const manner of MANNERS) for (const destination of DESTINATIONS) for (const write of WRITES) all.push({ manner, destination, write });
  if (ONLY) return all.filter((c) => new RegExp(ONLY).test(cellName(c)));
  if (ALL) return all;
  // A seeded sample that covers every manner first, then the destinations and writes it has not seen.
  let a = SEED >>> 0;
  const rnd = () => ((a = (Math.imul(a ^ (a >>> 15), 2654435761) + 0x6d2b79f5) >>> 0) / 4294967296);
  const shuffled = all.map((c) => ({ c, r: rnd() })).sort((x, y) => x.r - y.r).map((x) => x.c);
  const seen = new Set<string>();
  const picked: MannerCell[] = [];
  while (picked.length < Math.min(SAMPLE, all.length)) {
    const gain = (c: MannerCell) => [`m:${c.manner.name}`, `d:${c.destination.name}`, `w:${c.write}`].filter((f) => !seen.has(f)).length;
    const best = shuffled.filter((c) => !picked.includes(c)).sort((x, y) => gain(y) - gain(x))[0]!;
    picked.push(best);
    for (const f of [`m:${best.manner.name}`, `d:${best.destination.name}`, `w:${best.write}`]) seen.add(f);
  }
  return picked;
}

/** The source's data: the current row of each key, and every version written (what append keeps). */
class SourceData {
  private readonly current = new Map<bigint, FixtureRow>();
  private readonly versions: FixtureRow[] = [];
  constructor(private readonly file: string) {}

  async write(rows: readonly FixtureRow[]): Promise<void> {
    for (const r of rows) {
      this.current.set(r.id, r);
      this.versions.push(r);
    }
    const sorted = [...this.current.values()].sort((a, b) => (a.updated_at === b.updated_at ? Number(a.id - b.id) : a.updated_at < b.updated_at ? -1 : 1));
    await writeFile(this.file, `${sorted.map(tapLine).join('\n')}\n`);
  }

  rows(): FixtureRow[] {
    return [...this.current.values()];
  }

  expected(write: Write): Canonical[] {
    return (write === 'append' ? this.versions : this.rows()).map(toCanonical);
  }
}

class MannerRun {
  runs = 0;
  constructor(
    private readonly cell: MannerCell,
    private readonly config: string,
    private readonly files: SourceFiles,
    readonly pipelineName: string,
    private readonly destination: DestinationInstance,
    private readonly data: SourceData,
  ) {}

  private keyed(): 'id' | 'version' {
    return this.cell.write === 'append' ? 'version' : 'id';
  }

  async run(crashing = false): Promise<CliResult & { json: RunJson | undefined }> {
    this.runs += 1;
    await writeFile(this.config, `name: ${this.pipelineName}\n${this.cell.manner.source(this.files, this.cell.write, crashing)}\n${this.destination.yaml}\n`);
    await this.destination.beforeRun?.(this.pipelineName);
    const out = await cli(['run', this.config, '--json'], { env: { TIDEMARK_CONFIG_CACHE: 'off', ...this.destination.env } });
    let json: RunJson | undefined;
    try {
      json = out.stdout.trim() ? (JSON.parse(out.stdout) as RunJson) : undefined;
    } catch {
      json = undefined;
    }
    checkRunJson(out.code, json);
    return { ...out, json };
  }

  async ok(): Promise<RunJson | undefined> {
    const r = await this.run();
    if (r.code !== 0) throw new OracleError(`run ${this.runs} exit ${r.code}: ${r.stderr.trim().split('\n').slice(-4).join(' | ')}`);
    return r.json;
  }

  /** A failed or refused run: it says why, and what it committed is right as far as it goes. */
  async refused(crashing: boolean): Promise<void> {
    const r = await this.run(crashing);
    if (r.code === 0) throw new OracleError(`expected the run to fail (${this.cell.manner.message}), got exit 0`);
    if (this.cell.manner.message && !this.cell.manner.message.test(r.stderr)) throw new OracleError(`message ${JSON.stringify(r.stderr.trim().slice(-400))} does not match ${this.cell.manner.message}`);
    await this.nothingWrong();
  }

  /** Every committed row is one of the source's (version), and no key (version) is there twice. */
  async nothingWrong(): Promise<void> {
    const rows = await this.destination.rows(this.pipelineName, STREAM);
    const expected = new Set(this.data.expected(this.cell.write).map((r) => JSON.stringify(r)));
    const wrong = rows.filter((r) => !expected.has(JSON.stringify(r)));
    if (wrong.length > 0) throw new OracleError(`committed ${wrong.length} rows the source does not have, e.g. ${JSON.stringify(wrong[0])}`);
    checkRows(rows, rows, this.keyed());
  }

  async exact(): Promise<void> {
    checkRows(await this.destination.rows(this.pipelineName, STREAM), this.data.expected(this.cell.write), this.keyed());
    await this.destination.check(this.pipelineName, STREAM, true);
  }

  async syncs(): Promise<string[][]> {
    return this.cell.manner.syncs!(this.data);
  }

  /** One sync into `tidemark airbyte-destination write`, with the destination's config and the manner's catalog. */
  async write(lines: readonly string[], mustPass = true): Promise<CliResult> {
    this.runs += 1;
    const config = join(dirname(this.config), 'airbyte-config.json');
    const catalog = join(dirname(this.config), 'airbyte-catalog.json');
    const destination = (parseYaml(this.destination.yaml) as { destination: unknown }).destination;
    await writeFile(config, JSON.stringify({ name: this.pipelineName, destination, checkpoint_rows: STATE_EVERY }));
    await writeFile(catalog, airbyteCatalog(this.cell.write, this.cell.manner === airbyteNoState));
    await this.destination.beforeRun?.(this.pipelineName);
    const out = await airbyte(['write', '--config', config, '--catalog', catalog], `${lines.join('\n')}\n`, { ...this.destination.env });
    if (mustPass && out.code !== 0) throw new OracleError(`sync ${this.runs} exit ${out.code}: ${out.stderr.trim().split('\n').slice(-4).join(' | ')}`);
    // The destination reports its errors as Airbyte TRACE messages on stdout.
    return { ...out, stderr: `${out.stdout}${out.stderr}` };
  }

  /** A run with nothing new loads nothing (a full stream rebuilds) and leaves the rows as they were. */
  async quiet(): Promise<void> {
    const json = await this.ok();
    const loaded = json?.streams.reduce((n, s) => n + s.rows_loaded, 0);
    if (this.cell.write !== 'full' && loaded !== 0) throw new OracleError(`a run with nothing new loaded ${loaded} rows`);
    await this.exact();
  }
}

async function runMannerCell(cell: MannerCell, dir: string, uid: string): Promise<'passed' | 'refused' | 'skipped'> {
  const verdict = cell.destination.validate({ source: cell.manner.name, destination: cell.destination.name, write: cell.write, fault: { kind: 'none' } });
  if (verdict && 'skip' in verdict) return 'refused';
  const skipped = cell.manner.skip?.(cell.write);
  if (skipped !== undefined) return 'skipped';
  const rowsFile = join(dir, 'rows.jsonl');
  const module = join(dir, 'source.mjs');
  await writeFile(module, codeModule(rowsFile));
  const data = new SourceData(rowsFile);
  await data.write(cell.manner.initial?.() ?? fixtureRows(1, ROWS, { wideDecimals: true }));
  const api = cell.manner.api ? await startMannersApi(() => data.rows(), cell.manner.api) : undefined;
  const destination = await cell.destination.setup({ dir, uid });
  try {
    const run = new MannerRun(cell, join(dir, 'pipeline.yaml'), { data: rowsFile, module, ...(api ? { api } : {}) }, `p_${uid}`, destination, data);
    if (verdict && 'refuse' in verdict) {
      const r = cell.manner.syncs ? await run.write((await run.syncs())[0]!, false) : await run.run();
      const refusal = cell.manner.refusal ?? verdict.refuse;
      if (r.code === 0 || !refusal.test(r.stderr)) throw new OracleError(`expected the refusal ${refusal}, got exit ${r.code}: ${r.stderr.trim().slice(-300)}`);
      if ((await destination.rows(run.pipelineName, STREAM)).length > 0) throw new OracleError('a refused write loaded rows');
      return 'refused';
    }
    const scenario = typeof cell.manner.scenario === 'function' ? cell.manner.scenario(cell.write) : cell.manner.scenario;
    return await play(scenario, run, data);
  } finally {
    await destination.cleanup().catch(() => undefined);
    await api?.stop();
  }
}

/** The cell's runs: each ends exact, or (a crash, a refusal) right as far as it went. */
async function play(scenario: Scenario, run: MannerRun, data: SourceData): Promise<'passed' | 'refused'> {
  if (scenario === 'syncs') {
    for (const sync of await run.syncs()) await run.write(sync);
    await run.exact();
    return 'passed';
  }
  if (scenario === 'refuse') {
    await run.refused(false);
    return 'refused';
  }
  if (scenario === 'crash') await run.refused(true);
  await run.ok();
  await run.exact();
  if (scenario === 'change') {
    const { updates, inserts } = changedRows(data.rows(), true);
    await data.write([...updates, ...inserts]);
    await run.ok();
    await run.exact();
  }
  await run.quiet();
  return 'passed';
}

const slot = cellSlots(CONCURRENCY);

let root: string;
let cleanup: () => Promise<void>;
let started = 0;
const outcomes: { name: string; status: string; ms: number }[] = [];
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir('tidemark-manners-'));
  started = Date.now();
});
afterAll(async () => {
  const count = (s: string) => outcomes.filter((o) => o.status === s).length;
  console.log(`manners: ${outcomes.length} cells, ${count('passed')} passed, ${count('refused')} refused, ${count('skipped')} skipped, ${count('failed')} failed, ${((Date.now() - started) / 1000).toFixed(0)}s`);
  await endPg();
  if (count('failed') === 0) await cleanup();
});

describe(`conformance matrix, manners (TIDEMARK_MATRIX_SEED=${SEED})`, { concurrent: CONCURRENCY > 1 }, () => {
  let n = 0;
  for (const cell of cells()) {
    const test = CONCURRENCY > 1 ? it.concurrent : it;
    test(cellName(cell), () =>
      slot(async () => {
        n += 1;
        const uid = `mm${process.pid}_${n}_${Math.random().toString(36).slice(2, 6)}`;
        const dir = join(root, uid);
        await mkdir(dir, { recursive: true });
        const t0 = Date.now();
        const done = async (status: string, why = '') => {
          outcomes.push({ name: cellName(cell), status, ms: Date.now() - t0 });
          if (LOG) await appendFile(LOG, `${new Date().toISOString()} ${status} ${((Date.now() - t0) / 1000).toFixed(1)}s ${cellName(cell)}${why}\n`);
        };
        try {
          await done(await runMannerCell(cell, dir, uid));
          await rm(dir, { recursive: true, force: true });
        } catch (e) {
          const why = e instanceof Error ? e.message : String(e);
          await done('failed', ` :: ${why.slice(0, 400)}`);
          throw new Error(`${cellName(cell)} failed (reproduce: TIDEMARK_MATRIX_ONLY=${JSON.stringify(cellName(cell))}; files in ${dir}): ${why}`);
        }
      }),
    CONCURRENCY > 1 ? 3_600_000 : 300_000);
  }
});
