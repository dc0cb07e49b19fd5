/**
 * Singer taps with bad manners (tap-manners.mjs): records out of cursor order, STATEs that are not safe to resume
 * from, a key twice in one read. The engine checks each claim before it relies on it: every test loads exactly the
 * tap's records, across many checkpoints, crashes and re-runs.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';

const TAP = fileURLToPath(new URL('./taps/tap-manners.mjs', import.meta.url));
const PG_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

type Where = 'duckdb' | 'sqlite' | 'postgres';
type TapConfig = Record<string, unknown>;

interface Setup {
  readonly where?: Where;
  /** Extra lines of the stream (indented by four spaces). */
  readonly stream?: string;
  readonly source?: string;
  readonly pgSchema?: string;
}

function pipeline(tap: TapConfig, setup: Setup = {}): string {
  const where = setup.where ?? 'duckdb';
  const destination =
    where === 'duckdb'
      ? `  type: duckdb\n  path: ${JSON.stringify(join(dir, 'w.duckdb'))}`
      : where === 'sqlite'
        ? `  type: sqlite\n  path: ${JSON.stringify(join(dir, 'w.sqlite'))}`
        : `  type: postgres\n  url: ${PG_URL}\n  schema: ${setup.pgSchema}`;
  return `name: manners
source:
  type: singer
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}]
  config: ${JSON.stringify(tap)}
${setup.source ?? ''}streams:
  - name: events
    checkpoint_rows: 50
    batch_rows: 20
${setup.stream ?? ''}destination:
${destination}
`;
}

async function run(tap: TapConfig, setup: Setup = {}, ...flags: string[]) {
  const config = await writeYaml(dir, 'p.yaml', pipeline(tap, setup));
  const out = await cli(['run', config, '--json', ...flags]);
  return { ...out, config, stream: out.stdout ? JSON.parse(out.stdout).streams?.[0] : undefined };
}

async function query(where: Where, sql: string, pgSchema?: string): Promise<Record<string, unknown>[]> {
  if (where === 'duckdb') return duckdbQuery(join(dir, 'w.duckdb'), sql);
  if (where === 'sqlite') return sqliteQuery(join(dir, 'w.sqlite'), sql);
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    await client.query(`SET search_path TO "${pgSchema}"`);
    return (await client.query(sql)).rows;
  } finally {
    await client.end();
  }
}

/** Every id in the destination table, duplicates kept. */
async function ids(where: Where = 'duckdb', pgSchema?: string): Promise<number[]> {
  // A stream that never committed has no table yet.
  const tables = await query(where, where === 'sqlite' ? `SELECT name FROM sqlite_master WHERE name = 'events'` : `SELECT table_name FROM information_schema.tables WHERE table_name = 'events'${where === 'postgres' ? ` AND table_schema = '${pgSchema}'` : ''}`, pgSchema);
  if (tables.length === 0) return [];
  return (await query(where, 'SELECT id FROM events ORDER BY id', pgSchema)).map((r) => Number(r.id));
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe('order is observed, not believed', () => {
  it('an unsorted tap into append: the watermark is the highest record, so the >= re-send lands nowhere (2,006 keys, 2,006 rows)', async () => {
    const tap = { count: 2006, group: 3, order: 'shuffled', state_every: 70 };
    const first = await run(tap, { stream: '    write: append\n' });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stream).toMatchObject({ rows_read: 2006, rows_loaded: 2006, cursor_min: '2024-01-01T00:00:00.000001Z', cursor_max: '2024-01-01T00:11:08.000001Z' });
    // The tap's final bookmark is its highest updated_at: it re-sends that group of 2, which is committed.
    const again = await run(tap, { stream: '    write: append\n' });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stream).toMatchObject({ rows_loaded: 0 });
    expect(await ids()).toEqual(range(2006));
    const runs = await cli(['runs', '--config', first.config, '--json']);
    expect(runs.code, runs.stderr).toBe(0);
    expect(runs.stdout).toContain('2024-01-01T00:11:08.000001Z');
  }, 120_000);
});

describe('checkpoints are proven safe before they commit', () => {
  const crashThenHeal = async (tap: TapConfig, setup: Setup) => {
    const crashed = await run({ ...tap, crash_after: 1300 }, setup);
    expect(crashed.code, crashed.stdout).toBe(1);
    expect(crashed.stream.error).toContain('simulated failure after 1300 records');
    const committed = await ids();
    expect(new Set(committed).size).toBe(committed.length);
    const healed = await run(tap, setup);
    expect(healed.code, healed.stderr).toBe(0);
    expect(await ids()).toEqual(range(2006));
    return { crashed: committed.length };
  };

  it('an unsorted tap with a max-so-far bookmark dies: nothing of its STATEs is believed, the healthy re-run loses nothing (append)', async () => {
    await crashThenHeal({ count: 2006, group: 3, order: 'shuffled', bookmark: 'max', state_every: 70 }, { stream: '    write: append\n' });
  }, 120_000);

  it('the same tap into merge commits its rows on the way with the previous resume point, and loses nothing', async () => {
    const { crashed } = await crashThenHeal({ count: 2006, group: 3, order: 'shuffled', bookmark: 'max', state_every: 70 }, {});
    expect(crashed).toBeGreaterThan(1000);
  }, 120_000);

  it('a tap that sends each STATE before its records dies: the healthy re-run loses nothing (SDK state form, append)', async () => {
    await crashThenHeal({ count: 2006, group: 2, bookmark: 'ahead', state_every: 60, state_form: 'sdk' }, { stream: '    write: append\n' });
  }, 120_000);

  it('a sorted tap keeps committing at its STATEs, and its crash keeps what they covered', async () => {
    const { crashed } = await crashThenHeal({ count: 2006, group: 3, state_every: 70, state_form: 'sdk' }, { stream: '    write: append\n' });
    expect(crashed).toBeGreaterThan(1000);
  }, 120_000);

  it('checkpoint: end commits only when the tap has ended successfully', async () => {
    const { crashed } = await crashThenHeal({ count: 2006, group: 3, state_every: 70 }, { stream: '    write: append\n    checkpoint: end\n' });
    expect(crashed).toBe(0);
  }, 120_000);
});

describe('one row per key within a read', () => {
  const tap = { count: 2000, group: 3, twice_every: 7, state_every: 70 };
  const sent = Math.floor(2000 / 7);

  describe.each<Where>(['duckdb', 'sqlite', 'postgres'])('into %s', (where) => {
    let pgSchema: string | undefined;
    beforeEach(() => {
      pgSchema = where === 'postgres' ? `manners_${Math.random().toString(36).slice(2, 10)}` : undefined;
    });
    afterEach(async () => {
      if (pgSchema === undefined) return;
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`);
      await client.end();
    });

    it('strategy full: a tap that sends ids twice loads each key once, and says how many it dropped', async () => {
      const out = await run(tap, { where, pgSchema, stream: '    strategy: full\n' });
      expect(out.code, out.stderr).toBe(0);
      expect(out.stream).toMatchObject({ rows_read: 2000, rows_loaded: 2000, rows_rejected: 0, rows_duplicate: sent });
      expect(await ids(where, pgSchema)).toEqual(range(2000));
    }, 120_000);
  });

  it('merge and append: the same tap lands each key once (append drops the identical re-sends)', async () => {
    const merged = await run(tap, {});
    expect(merged.code, merged.stderr).toBe(0);
    expect(merged.stream).toMatchObject({ rows_read: 2000, rows_loaded: 2000, rows_duplicate: sent });
    expect(await ids()).toEqual(range(2000));
    await cleanup();
    ({ dir, cleanup } = await (await import('../../helpers/fs.js')).tempDir());
    const appended = await run(tap, { stream: '    write: append\n' });
    expect(appended.code, appended.stderr).toBe(0);
    expect(appended.stream).toMatchObject({ rows_read: 2000, rows_loaded: 2000, rows_duplicate: sent });
    expect(await ids()).toEqual(range(2000));
  }, 120_000);
});

describe('keys and fields come from the tap', () => {
  it("a selection catalog without table-key-properties and with fewer fields: the tap's key_properties merge, only deselected fields are left out", async () => {
    // As DataSpoc users write it: the stream selected, two of the tap's fields listed, note deselected, no key.
    const catalog = {
      streams: [
        {
          tap_stream_id: 'events',
          stream: 'events',
          schema: { type: 'object', properties: { id: { type: 'integer' }, updated_at: { type: 'string', format: 'date-time' } } },
          metadata: [
            { breadcrumb: [], metadata: { selected: true, 'replication-method': 'INCREMENTAL', 'replication-key': 'updated_at' } },
            { breadcrumb: ['properties', 'note'], metadata: { selected: false } },
          ],
        },
      ],
    };
    const source = `  catalog: ${JSON.stringify(catalog)}\n`;
    const first = await run({ count: 300, group: 3, state_every: 40 }, { source });
    expect(first.code, first.stderr).toBe(0);
    const plan = await cli(['plan', first.config, '--json']);
    expect(JSON.parse(plan.stdout)[0].write, plan.stderr).toBe('merge');
    // Ids 1..5 change upstream (a later updated_at): they replace their rows.
    const second = await run({ count: 300, group: 3, state_every: 40, touch: 5 }, { source });
    expect(second.code, second.stderr).toBe(0);
    expect(await ids()).toEqual(range(300));
    const columns = (await query('duckdb', `SELECT column_name FROM information_schema.columns WHERE table_name = 'events' ORDER BY ordinal_position`)).map((c) => c.column_name);
    expect(columns).toEqual(['id', 'updated_at', 'amount']);
    expect((await query('duckdb', 'SELECT amount FROM events WHERE id <= 6 ORDER BY id')).map((r) => Number(r.amount))).toEqual([1010, 1020, 1030, 1040, 1050, 60]);
  }, 120_000);
});

describe('keyless streams name what identifies a version', () => {
  it('volatile_columns: records re-sent with a new fetched_at on every run are recognised and not appended again', async () => {
    const tap = { count: 300, group: 3, state_every: 40, keyless: true, fetched_at: true };
    const setup = { stream: '    volatile_columns: [fetched_at]\n' };
    for (let i = 0; i < 3; i += 1) {
      const out = await run(tap, setup);
      expect(out.code, out.stderr).toBe(0);
      await new Promise((r) => setTimeout(r, 5)); // a later fetched_at
    }
    const rows = await query('duckdb', 'SELECT count(*) AS n, count(DISTINCT id) AS d FROM events');
    expect(rows[0]).toEqual({ n: 300n, d: 300n });
    // The tap grows: only the new records land.
    const grown = await run({ ...tap, count: 330 }, setup);
    expect(grown.stream).toMatchObject({ rows_loaded: 30 });
    expect(await ids()).toEqual(range(330));
  }, 120_000);
});

describe('backfilling a Singer stream', () => {
  it("state set moves the tap's bookmark with the watermark: the tap re-sends from there and the corrections merge", async () => {
    for (const form of ['plain', 'sdk']) {
      const tap = { count: 300, group: 3, state_every: 40, state_form: form };
      const first = await run(tap);
      expect(first.code, first.stderr).toBe(0);
      const set = await cli(['state', 'set', 'events', '--cursor', '2024-01-01T00:00:50.000001Z', '--config', first.config]);
      expect(set.code, set.stderr).toBe(0);
      const exported = JSON.parse((await cli(['state', 'export', '--config', first.config])).stdout);
      const bookmark = exported.bookmarks.events;
      expect(form === 'sdk' ? bookmark.replication_key_value : bookmark.updated_at).toBe('2024-01-01T00:00:50.000001Z');
      // Upstream corrected every amount; the tap re-sends ids 151..300 (updated_at >= 00:00:50), which merge.
      const backfill = await run({ ...tap, amount_bump: 7 });
      expect(backfill.code, backfill.stderr).toBe(0);
      expect(backfill.stream).toMatchObject({ rows_loaded: 150 });
      expect(await ids()).toEqual(range(300));
      const amounts = await query('duckdb', 'SELECT id, amount FROM events WHERE id IN (150, 151, 300) ORDER BY id');
      expect(amounts.map((r) => Number(r.amount))).toEqual([1500, 1517, 3007]);
      await cleanup();
      ({ dir, cleanup } = await (await import('../../helpers/fs.js')).tempDir());
    }
  }, 180_000);

  it('on an append stream, moving the bookmark back is refused (it would append the rows again)', async () => {
    const first = await run({ count: 100, group: 3, state_every: 40 }, { stream: '    write: append\n' });
    expect(first.code, first.stderr).toBe(0);
    const set = await cli(['state', 'set', 'events', '--cursor', '2024-01-01T00:00:10.000001Z', '--config', first.config]);
    expect(set.code).not.toBe(0);
    expect(set.stderr).toContain('appends its rows');
  }, 60_000);
});
