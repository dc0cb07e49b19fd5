import { readdir, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml, upsertItems } from '../helpers/shop.js';
import { destinationQuery } from '../helpers/warehouse.js';

const KINDS = ['duckdb', 'sqlite'] as const;

describe.each(KINDS)('incremental runs into %s', (kind) => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let source: string;
  let target: string;
  let config: string;

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir());
    source = join(dir, 'source.sqlite');
    target = join(dir, kind === 'duckdb' ? 'warehouse.duckdb' : 'warehouse.sqlite');
  });
  afterEach(() => cleanup());

  async function state(): Promise<{ version: number; streams: Record<string, { watermark?: { cursor: { value: string }; pk: { value: string }[] }; run_count?: number }> }> {
    const out = await cli(['state', 'show', '--json', '--config', config]);
    expect(out.code, out.stderr).toBe(0);
    return JSON.parse(out.stdout);
  }

  async function contents(): Promise<{ n: number; distinct: number; values: string[] }> {
    const rows = await destinationQuery(kind, target, `SELECT CAST(id AS VARCHAR) AS id, value FROM items ORDER BY id`);
    return { n: rows.length, distinct: new Set(rows.map((r) => String(r.id))).size, values: rows.map((r) => `${r.id}:${r.value}`) };
  }

  it('loads, then a no-op re-run moves 0 rows and writes only its run record and run marks', async () => {
    createItems(source, itemRange(1, 250, 10));
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target } }));
    const first = await cli(['run', config, '--json']);
    expect(first.code, first.stderr).toBe(0);
    const result = JSON.parse(first.stdout);
    expect(result.streams[0]).toMatchObject({ stream: 'items', outcome: 'committed', rows_read: 250, rows_loaded: 250, rows_rejected: 0 });
    const before = await state();
    const runsBefore = (await cli(['runs', '--json', '--config', config])).stdout;
    const second = await cli(['run', config, '--json']);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout).streams[0]).toMatchObject({ rows_read: 0, rows_loaded: 0, commits: 0 });
    const after = await state();
    expect(after.version).toBe(before.version + 1);
    expect(after.streams.items!.watermark).toEqual(before.streams.items!.watermark);
    expect(after.streams.items!.run_count).toBe(before.streams.items!.run_count! + 1);
    const runsAfter = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout) as unknown[];
    expect(runsAfter.slice(1)).toEqual(JSON.parse(runsBefore));
    expect(runsAfter[0]).toMatchObject({ run_id: JSON.parse(second.stdout).run_id, rows_read: 0, commits: 0, outcome: 'committed' });
    expect((await contents()).n).toBe(250);
  });

  it('a deleted lock directory does not fence the next runs out: their tokens start above the one the destination saw', async () => {
    createItems(source, itemRange(1, 30, 3));
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target } }));
    expect((await cli(['run', config])).code).toBe(0);
    upsertItems(source, itemRange(31, 5, 3, 100));
    expect((await cli(['run', config])).code).toBe(0);
    const fence = async () => Number((await destinationQuery(kind, target, `SELECT token FROM _tidemark_locks`))[0]!.token);
    expect(await fence()).toBe(2);
    await rm(`${target}.locks`, { recursive: true, force: true });
    upsertItems(source, itemRange(36, 5, 3, 200));
    const after = await cli(['run', config, '--json']);
    expect(after.code, after.stderr).toBe(0);
    expect(JSON.parse(after.stdout).streams[0].rows_loaded).toBe(5);
    expect(await fence()).toBe(3);
    expect(await contents()).toMatchObject({ n: 40, distinct: 40 });
  });

  it('never loses or duplicates rows that share a cursor value across batch, checkpoint and run boundaries', async () => {
    // 7 rows per timestamp; batches of 5 and checkpoints every 6 rows fall inside tie groups.
    createItems(source, itemRange(1, 40, 7));
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target }, stream: { write: 'append', checkpoint_rows: 6, batch_rows: 5 } }));
    const first = await cli(['run', config, '--json']);
    expect(first.code, first.stderr).toBe(0);
    const r1 = JSON.parse(first.stdout).streams[0];
    expect(r1.rows_loaded).toBe(40);
    expect(r1.commits).toBeGreaterThan(1);
    // The last group (ids 36..42 share one second) was cut by the run boundary at id 40; more rows join it.
    upsertItems(source, itemRange(41, 9, 7));
    const second = await cli(['run', config, '--json']);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout).streams[0].rows_loaded).toBe(9);
    const c = await contents();
    expect(c).toMatchObject({ n: 49, distinct: 49 });
    const s = await state();
    expect(s.streams.items!.watermark!.pk[0]!.value).toBe('49');
  });

  it('merges updates in place: the newest version of each row wins', async () => {
    createItems(source, itemRange(1, 30, 3));
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target } }));
    expect((await cli(['run', config])).code).toBe(0);
    upsertItems(source, itemRange(5, 3, 100, 3600, 'v2'));
    const out = await cli(['run', config, '--json']);
    expect(JSON.parse(out.stdout).streams[0].rows_loaded).toBe(3);
    const c = await contents();
    expect(c.n).toBe(30);
    expect(c.values).toContain('5:v2-5');
    expect(c.values).toContain('8:v1-8');
  });

  it('loads each row of a table without a primary key once, also rows that arrive later sharing the newest cursor value', async () => {
    const db = new Database(source);
    db.exec(`CREATE TABLE events (at TIMESTAMP, what TEXT)`);
    const add = (...rows: [string, string][]) => rows.forEach(([at, what]) => db.prepare(`INSERT INTO events VALUES (?, ?)`).run(at, what));
    add(['2024-01-01 10:00:00', 'a'], ['2024-01-01 10:00:01', 'b'], ['2024-01-01 10:00:01', 'c']);
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target }, stream: { table: 'events', primary_key: undefined, cursor: 'at' } }));
    const loaded = async () => JSON.parse((await cli(['run', config, '--json'])).stdout).streams[0].rows_loaded as number;
    const events = async () => (await destinationQuery(kind, target, `SELECT what FROM events ORDER BY what`)).map((r) => String(r.what));
    // The newest second may still grow: it waits for a run that sees a newer one.
    expect(await loaded()).toBe(1);
    expect(await loaded()).toBe(0);
    add(['2024-01-01 10:00:01', 'd'], ['2024-01-01 10:00:02', 'e']);
    expect(await loaded()).toBe(3);
    expect(await events()).toEqual(['a', 'b', 'c', 'd']);
    add(['2024-01-01 10:00:03', 'f']);
    expect(await loaded()).toBe(1);
    expect(await loaded()).toBe(0);
    expect(await events()).toEqual(['a', 'b', 'c', 'd', 'e']);
    db.close();
  });

  it('keeps int64 beyond 2^53 and microsecond timestamps exact', async () => {
    createItems(source, [
      { id: 9007199254740993n, updated_at: '2024-05-06 07:08:09.123456', value: 'big' },
      { id: 1, updated_at: '2024-05-06 07:08:09.000001', value: 'small' },
    ]);
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target } }));
    const out = await cli(['run', config]);
    expect(out.code, out.stderr).toBe(0);
    const ts = kind === 'duckdb' ? `strftime(updated_at, '%Y-%m-%d %H:%M:%S.%f')` : 'updated_at';
    const rows = await destinationQuery(kind, target, `SELECT CAST(id AS VARCHAR) AS id, ${ts} AS ts FROM items ORDER BY id`);
    expect(rows.map((r) => [String(r.id), r.ts])).toEqual([
      ['1', '2024-05-06 07:08:09.000001'],
      ['9007199254740993', '2024-05-06 07:08:09.123456'],
    ]);
    const s = await state();
    expect(s.streams.items!.watermark!.pk[0]!.value).toBe('9007199254740993');
    expect(s.streams.items!.watermark!.cursor.value).toBe('2024-05-06 07:08:09.123456');
  });

  it('accounts for every row: a value the column cannot hold goes to _tidemark_rejects', async () => {
    createItems(source, itemRange(1, 5, 1));
    const db = (await import('better-sqlite3')).default(source);
    db.exec(`ALTER TABLE items ADD COLUMN qty INTEGER`);
    db.exec(`UPDATE items SET qty = id * 10`);
    db.exec(`UPDATE items SET qty = 'many' WHERE id = 3`);
    db.close();
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target } }));
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    const r = JSON.parse(out.stdout).streams[0];
    expect(r).toMatchObject({ rows_read: 5, rows_loaded: 4, rows_rejected: 1 });
    const rejects = await destinationQuery(kind, target, `SELECT column_name, reason, "row" FROM _tidemark_rejects`);
    expect(rejects).toHaveLength(1);
    expect(rejects[0]!.column_name).toBe('qty');
    expect(String(rejects[0]!.reason)).toMatch(/qty.*many/);
    expect(JSON.parse(String(rejects[0]!.row))).toMatchObject({ id: '3', qty: 'many' });
  });

  it('adds a column the source grew, inside the commit that first carries it', async () => {
    createItems(source, itemRange(1, 10, 2));
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target } }));
    expect((await cli(['run', config])).code).toBe(0);
    const db = (await import('better-sqlite3')).default(source);
    db.exec(`ALTER TABLE items ADD COLUMN "Note Ü" TEXT`);
    db.exec(`UPDATE items SET "Note Ü" = 'grown', updated_at = '2024-02-01 00:00:00' WHERE id = 4`);
    db.close();
    const out = await cli(['run', config, '--json']);
    expect(out.code, out.stderr).toBe(0);
    const rows = await destinationQuery(kind, target, `SELECT CAST(id AS VARCHAR) AS id, "Note Ü" AS note FROM items WHERE id IN (3, 4) ORDER BY id`);
    expect(rows.map((r) => [String(r.id), r.note])).toEqual([['3', null], ['4', 'grown']]);
  });

  it('stops on NULL cursors by default, naming the stream and the count', async () => {
    createItems(source, [...itemRange(1, 3, 1), { id: 4, updated_at: null, value: 'x' }, { id: 5, updated_at: null, value: 'y' }]);
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: kind, path: target } }));
    const out = await cli(['run', config]);
    expect(out.code).toBe(1);
    expect(out.stderr + out.stdout).toMatch(/items.*2 rows have a NULL cursor updated_at/);
    const include = await writeYaml(dir, 'p2.yaml', pipelineYaml({ name: 'inc', source, destination: { type: kind, path: target }, stream: { on_null_cursor: 'include' } }));
    const ok = await cli(['run', include, '--json']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout).streams[0].rows_loaded).toBe(5);
  });
});

describe('schema and stream selection', () => {
  it('tidemark schema prints the JSON Schema of pipeline files', async () => {
    const out = await cli(['schema']);
    expect(out.code).toBe(0);
    const schema = JSON.parse(out.stdout);
    expect(Object.keys(schema.properties)).toEqual(expect.arrayContaining(['name', 'source', 'streams', 'destination', 'state']));
  });

  it('--stream runs only the named streams, and an unknown one is a usage error', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const source = join(dir, 's.sqlite');
      createItems(source, itemRange(1, 5, 1));
      const config = await writeYaml(
        dir,
        'p.yaml',
        `name: two\nsource: {type: sqlite, path: s.sqlite}\nstreams:\n  - table: items\n    primary_key: [id]\n    cursor: updated_at\n  - name: copy\n    query: SELECT * FROM items\n    primary_key: [id]\n    strategy: full\ndestination: {type: duckdb, path: w.duckdb}\n`,
      );
      const one = await cli(['run', config, '--stream', 'copy', '--json']);
      expect(one.code, one.stderr).toBe(0);
      expect(JSON.parse(one.stdout).streams.map((s: { stream: string }) => s.stream)).toEqual(['copy']);
      const bad = await cli(['run', config, '--stream', 'nope']);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/no stream nope \(streams: items, copy\)/);
    } finally {
      await cleanup();
    }
  });
});

describe('command line', () => {
  it('run without commander and through it agree: unknown options are usage errors, --version and --help exit 0', async () => {
    const unknown = await cli(['run', 'p.yaml', '--bogus']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown option '--bogus'");
    // No pipeline named: every pipeline of the pipelines folder; here there is none.
    const { dir: empty, cleanup: removeEmpty } = await tempDir();
    const missing = await cli(['run'], { cwd: empty });
    await removeEmpty();
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('no pipeline files (*.yaml, *.yml) in .');
    const version = await cli(['--version']);
    expect(version.code).toBe(0);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    const help = await cli(['run', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('--stream <name>');
  });

  it('starts from a code cache in the user cache directory, survives a corrupt one, prunes old builds, and runs without one when told', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const env = { XDG_CACHE_HOME: dir };
      const codeDir = join(dir, 'tidemark', 'code');
      const first = await cli(['--version'], { env });
      expect(first.code, first.stderr).toBe(0);
      const [entry, ...others] = await readdir(codeDir);
      expect(others).toEqual([]);
      // Named by the bundle's hash, its length, Node's version and the CPU: another build or Node gets its own.
      expect(entry).toMatch(new RegExp(`^[0-9a-f]{16}-\\d+-${process.version.replace(/\./g, '\\.')}-${process.arch}\\.bin$`));
      const cached = await stat(join(codeDir, entry!));
      expect(cached.size).toBeGreaterThan(10_000);
      const second = await cli(['--version'], { env });
      expect(second.stdout).toBe(first.stdout);
      expect((await stat(join(codeDir, entry!))).mtimeMs).toBe(cached.mtimeMs); // accepted, not written again
      await writeFile(join(codeDir, entry!), 'not a code cache');
      const corrupt = await cli(['--version'], { env });
      expect(corrupt.code, corrupt.stderr).toBe(0);
      expect(corrupt.stdout).toBe(first.stdout);
      expect((await readFile(join(codeDir, entry!))).length).toBeGreaterThan(10_000); // rejected by V8, so written anew
      const off = join(dir, 'off');
      const plain = await cli(['--version'], { env: { XDG_CACHE_HOME: off, TIDEMARK_CODE_CACHE: 'off' } });
      expect(plain.stdout).toBe(first.stdout);
      await expect(stat(off)).rejects.toThrow(/ENOENT/);
      // Entries of other builds are pruned to the newest eight when one is written.
      await rm(join(codeDir, entry!));
      for (let i = 0; i < 10; i += 1) {
        const old = join(codeDir, `old-${i}.bin`);
        await writeFile(old, 'x');
        await utimes(old, new Date(Date.UTC(2020, 0, 1 + i)), new Date(Date.UTC(2020, 0, 1 + i)));
      }
      expect((await cli(['--version'], { env })).code).toBe(0);
      const kept = await readdir(codeDir);
      expect(kept).toHaveLength(8);
      expect(kept).toContain(entry);
      expect(kept).not.toContain('old-0.bin');
    } finally {
      await cleanup();
    }
  });
});

describe('config errors', () => {
  it('exit 2 with the file and the path in the document', async () => {
    const { dir, cleanup } = await tempDir();
    try {
      const file = await writeYaml(dir, 'bad.yaml', `name: x\nsource: {type: sqlite, path: a.db}\nstreams:\n  - table: t\n    cursor: c\n    lookback: 5m\n    write: append\n`);
      const out = await cli(['validate', file]);
      expect(out.code).toBe(2);
      expect(out.stderr).toContain('bad.yaml');
      expect(out.stderr).toContain('streams[0].lookback');
      const typo = await writeYaml(dir, 'typo.yaml', `name: x\nsource: {type: sqlite, path: a.db}\nstreams:\n  - table: t\n    cursor: 5\n`);
      const out2 = await cli(['run', typo]);
      expect(out2.code).toBe(2);
      expect(out2.stderr).toMatch(/streams\[0\]\.cursor/);
      const env = await writeYaml(dir, 'env.yaml', `name: x\nsource: {type: sqlite, path: "\${env:TM_TEST_MISSING}"}\nstreams:\n  - table: t\n`);
      const out3 = await cli(['validate', env]);
      expect(out3.code).toBe(2);
      expect(out3.stderr).toContain('TM_TEST_MISSING');
      const full = await writeYaml(dir, 'full.yaml', `name: x\nsource: {type: sqlite, path: a.db}\nstreams:\n  - table: t\n    strategy: full\n    write: append\n`);
      const out4 = await cli(['validate', full]);
      expect(out4.code).toBe(2);
      expect(out4.stderr).toMatch(/full\.yaml: streams\[0\]\.write: strategy full .*\(got append\)/);
      expect(await readFile(file, 'utf8')).toContain('lookback');
    } finally {
      await cleanup();
    }
  });
});
