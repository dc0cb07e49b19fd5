/**
 * `tidemark run`'s progress display. On a terminal (a pseudo-terminal made by `script`): a bar with total, rows/s and
 * ETA where the total is known (Postgres statistics, partitions i/N), one line per stream. Off a terminal: plain lines
 * on stderr; under --json, stdout holds the result and nothing else.
 */
import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../conformance/postgres-fixture.js';
import { createMysqlDb } from '../integration/mysql/mysql-db.js';
import { writeTaxiMonth } from '../fixtures/taxi.js';
import { BIN, cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';

const exec = promisify(execFile);
const ROWS = 20_000;

/**
 * The CLI on a pseudo-terminal 200 columns wide: what the terminal received, without its escape sequences. Frames of
 * one line overwrite each other (cursor to column 1), so each line of the result holds every frame of one display line.
 */
async function onTerminal(args: readonly string[], env: Record<string, string>, options: { resetsAsBreaks?: boolean } = {}): Promise<string> {
  const command = `stty cols 200 rows 40; exec ${[process.execPath, BIN, ...args].map((a) => `'${a}'`).join(' ')}`;
  // A failed run (exit 1) still leaves its screen to look at.
  const screen = await exec('script', ['-qec', command, '/dev/null'], { env: { ...process.env, TIDEMARK_FAILPOINTS: '', ...env } }).catch((error: { stdout: string }) => error);
  // With resetsAsBreaks, what is written after a cursor-to-column-1 or clear-line starts a line of its own.
  const out = options.resetsAsBreaks ? screen.stdout.replace(/\x1b\[(1G|2K)/g, '\n') : screen.stdout;
  return out.replace(/\x1b\[[?0-9;]*[A-Za-z]/g, '').replace(/\r/g, '');
}

/** The display lines (of the screen as above) that mention `name`. */
function linesOf(screen: string, name: string): string[] {
  return screen.split('\n').filter((l) => l.includes(`${name}  `));
}

let db: TestDatabase;
let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-progress-'));
  db = await createTestDatabase('tm_progress');
  for (const table of ['events', 'users']) {
    await db.query(`CREATE TABLE ${table} (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text NOT NULL)`);
    await db.query(`INSERT INTO ${table} SELECT g, timestamptz '2024-01-01' + g * interval '1 second', 'n' || g FROM generate_series(1, ${ROWS}) g`);
    // reltuples, the estimate the bar's total comes from, is kept by ANALYZE.
    await db.query(`ANALYZE ${table}`);
  }
});
afterAll(async () => {
  await db.drop();
  await cleanup();
});

async function pgPipeline(name: string): Promise<string> {
  const sub = join(dir, name);
  await mkdir(sub, { recursive: true });
  return writeYaml(
    sub,
    'pg.yaml',
    `name: pg
source: { type: postgres, url: ${JSON.stringify(db.url)} }
streams:
  - { table: public.events, primary_key: [id], cursor: updated_at, checkpoint_rows: 2048 }
  - { table: public.users, primary_key: [id], cursor: updated_at, checkpoint_rows: 2048 }
destination: { type: duckdb, path: ${JSON.stringify(join(sub, 'warehouse.duckdb'))} }
`,
  );
}

// A pause inside the first stream's read: the display redraws (10 times a second) while the run is under way.
const PAUSE = { TIDEMARK_FAILPOINTS: 'load.after_write=2:sleep(600)' };

describe('on a terminal', () => {
  it('shows a bar per stream with the total from Postgres statistics, rows/s, elapsed and ETA', async () => {
    const screen = await onTerminal(['run', await pgPipeline('tty')], PAUSE);
    expect(screen).toMatch(/pg\.events {2}\[█+░*\] +\d+% {2}[\d,]+ rows of ~20,000 {2}[\d,]+ rows\/s {2}\d+\.\ds {2}ETA (\d+\.\ds|—)/);
    // The final frame: both streams complete, each on a display line of its own.
    const [events, ...others] = linesOf(screen, 'pg.events');
    expect(events).toMatch(/pg\.events {2}\[█{24}\] 100% {2}20,000 rows of ~20,000 {2}[\d,]+ rows\/s {2}\d+\.\ds$/);
    expect(others).toEqual([]);
    expect(linesOf(screen, 'pg.users').at(-1)).toMatch(/pg\.users {2}\[█{24}\] 100% {2}20,000 rows of ~20,000 {2}[\d,]+ rows\/s {2}\d+\.\ds$/);
    // The summary still follows on stdout.
    expect(screen).toContain('pg.events: 20,000 read, 20,000 loaded');
  });

  it('leaves a stream that failed at the share it reached, marked failed, not at 100%', async () => {
    const screen = await onTerminal(['run', await pgPipeline('tty-failed'), '--stream', 'events'], { TIDEMARK_FAILPOINTS: 'load.after_write=3:throw' });
    const final = linesOf(screen, 'pg.events').at(-1) ?? '';
    expect(final).toMatch(/pg\.events {2}\[█+░+\] +\d+% {2}[\d,]+ rows of ~20,000 {2}[\d,]+ rows\/s {2}\d+\.\ds {2}failed/);
    expect(final).not.toContain('100%');
  });

  it('shows a spinner line with rows, rows/s and elapsed when no total is known', async () => {
    const config = await pgPipeline('tty-incremental');
    expect((await cli(['run', config])).code).toBe(0);
    await db.query(`INSERT INTO events SELECT g, timestamptz '2025-01-01' + g * interval '1 second', 'm' || g FROM generate_series(${ROWS + 1}, ${ROWS + 5000}) g`);
    try {
      // A read from a watermark: the table's statistics say nothing of how many rows follow it.
      const screen = await onTerminal(['run', config, '--stream', 'events'], PAUSE);
      expect(screen).toMatch(/pg\.events {2}[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] [\d,]+ rows {2}[\d,]+ rows\/s {2}\d+\.\ds/);
      expect(screen).toMatch(/pg\.events {2}✓ 5,000 rows {2}[\d,]+ rows\/s {2}\d+\.\ds\n/);
      expect(screen).not.toContain('ETA');
    } finally {
      await db.query(`DELETE FROM events WHERE id > ${ROWS}`);
    }
  });

  async function tripsPipeline(name: string, extraStreams = ''): Promise<string> {
    const sub = join(dir, name);
    await mkdir(join(sub, 'trips'), { recursive: true });
    for (const m of [1, 2, 3]) await writeTaxiMonth(join(sub, 'trips', `yellow_tripdata_2024-0${m}.parquet`), { year: 2024, month: m, rows: 3000, seed: m });
    return writeYaml(
      sub,
      'trips.yaml',
      `name: trips
source: { type: files, location: ${JSON.stringify(sub)} }
streams:
  - name: trips
    pattern: trips/yellow_tripdata_{month}.parquet
    partition_column: month
${extraStreams}destination: { type: sqlite, path: ${JSON.stringify(join(sub, 'warehouse.sqlite'))} }
`,
    );
  }

  it('shows partitions i/N of a partitioned stream', async () => {
    const screen = await onTerminal(['run', await tripsPipeline('parts')], { TIDEMARK_FAILPOINTS: 'load.after_commit=2:sleep(600)' });
    expect(screen).toMatch(/trips\.trips {2}\[█+░+\] +\d+% {2}[\d,]+ rows partition 2\/3 2024-02 {2}[\d,]+ rows\/s {2}\d+\.\ds {2}ETA/);
    expect(screen).toMatch(/trips\.trips {2}\[█{24}\] 100% {2}9,000 rows partition 3\/3 2024-03/);
  });

  it('prints a warning given while the bars are drawn on a line of its own', async () => {
    // The second stream's pattern matches nothing: its warning comes while the first stream's bar is on screen.
    const ghosts = '  - name: ghosts\n    pattern: ghosts/g_{month}.parquet\n    partition_column: month\n';
    const screen = await onTerminal(['run', await tripsPipeline('warned', ghosts)], {}, { resetsAsBreaks: true });
    expect(screen.split('\n').filter((l) => l.startsWith('warn: ')), JSON.stringify(screen)).toEqual([
      expect.stringMatching(/^warn: pipeline trips, stream ghosts: pattern ghosts\/g_\{month\}\.parquet matches no file/),
    ]);
    expect(linesOf(screen, 'trips.trips').at(-1)).toMatch(/^trips\.trips {2}\[█{24}\] 100% {2}9,000 rows/);
    expect(screen).not.toMatch(/ETA [^\n]*warn:/);
  });
});

describe('off a terminal', () => {
  it('prints plain lines on stderr with rows/s and elapsed', async () => {
    const out = await cli(['run', await pgPipeline('plain')]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toMatch(/^progress: pg\.events: [\d,]+ rows read \(of ~20,000, \d+%\), [\d,]+ rows\/s, \d+\.\ds elapsed$/m);
    expect(out.stderr).toMatch(/^progress: pg\.users: [\d,]+ rows read/m);
    expect(out.stdout).not.toContain('progress');
  });

  it('counts rate and elapsed time from when the stream began, not from its first report', async () => {
    const config = await pgPipeline('plain-late');
    expect((await cli(['run', config])).code).toBe(0);
    await db.query(`INSERT INTO events SELECT g, timestamptz '2025-01-01' + g * interval '1 second', 'm' || g FROM generate_series(${ROWS + 1}, ${ROWS + 5000}) g`);
    try {
      // A read from a watermark has no total, so the first report comes only after the first batch, which takes 0.8 s.
      const out = await cli(['run', config, '--stream', 'events'], { env: { TIDEMARK_FAILPOINTS: 'extract.after_batch=1:sleep(800)' } });
      expect(out.code, out.stderr).toBe(0);
      const [, rows, perSecond, seconds] = /^progress: pg\.events: ([\d,]+) rows read, ([\d,]+) rows\/s, (\d+\.\d)s elapsed$/m.exec(out.stderr) ?? [];
      expect(Number(rows?.replace(/,/g, '')), out.stderr).toBeGreaterThan(0);
      expect(Number(seconds)).toBeGreaterThanOrEqual(0.8);
      expect(Number(perSecond?.replace(/,/g, ''))).toBeGreaterThan(0);
    } finally {
      await db.query(`DELETE FROM events WHERE id > ${ROWS}`);
    }
  });

  it('takes the total of a MySQL table from its InnoDB row estimate', async () => {
    const my = await createMysqlDb('tm_progress');
    try {
      await my.sql('CREATE TABLE events (id BIGINT PRIMARY KEY, note VARCHAR(20) NOT NULL) ENGINE=InnoDB');
      for (let start = 0; start < 5000; start += 1000) {
        await my.sql(`INSERT INTO events VALUES ${Array.from({ length: 1000 }, (_, i) => `(${start + i + 1}, 'n${start + i + 1}')`).join(', ')}`);
      }
      await my.sql('ANALYZE TABLE events');
      const sub = join(dir, 'mysql');
      await mkdir(sub, { recursive: true });
      const config = await writeYaml(
        sub,
        'my.yaml',
        `name: my\nsource: { type: mysql, url: ${JSON.stringify(my.url)} }\nstreams:\n  - { table: events, primary_key: [id], batch_rows: 1000 }\ndestination: { type: sqlite, path: ${JSON.stringify(join(sub, 'w.sqlite'))} }\n`,
      );
      const out = await cli(['run', config]);
      expect(out.code, out.stderr).toBe(0);
      // An estimate: InnoDB samples pages, so the figure is near 5,000, not exactly it.
      expect(out.stderr).toMatch(/^progress: my\.events: [\d,]+ rows read \(of ~[\d,]+, \d+%\), [\d,]+ rows\/s, \d+\.\ds elapsed$/m);
    } finally {
      await my.drop();
    }
  });

  it('keeps stdout to the JSON result under --json, and prints no progress', async () => {
    const out = await cli(['run', await pgPipeline('json'), '--json']);
    expect(out.code, out.stderr).toBe(0);
    const result = JSON.parse(out.stdout) as { streams: { rows_read: number }[] };
    expect(result.streams.map((s) => s.rows_read)).toEqual([ROWS, ROWS]);
    expect(out.stderr).not.toContain('progress');
  });
});
