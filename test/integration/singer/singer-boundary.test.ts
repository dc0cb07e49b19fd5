/**
 * A `>=` tap (tap-groups: 40 records share each updated_at, STATE every 15 records, so STATE falls inside groups)
 * into append destinations: the engine drops the records at or below what it committed, on a quiet re-run, after the
 * tap grew, after a crash mid-group, and after `run --full`.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { committed, dirLake, orphans, tableRows } from '../../e2e/lake/helpers.js';

const TAP = fileURLToPath(new URL('./taps/tap-groups.mjs', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

type Where = 'lake' | 'duckdb';

function pipeline(where: Where, tap: Record<string, number>, write = 'write: append'): string {
  const destination =
    where === 'lake'
      ? `destination:\n  type: files\n  location: ${JSON.stringify(join(dir, 'lake'))}\n`
      : `destination:\n  type: duckdb\n  path: ${JSON.stringify(join(dir, 'w.duckdb'))}\n`;
  return `name: groups
source:
  type: singer
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}]
  config: ${JSON.stringify(tap)}
streams:
  - name: events
    ${write}
    checkpoint_rows: 10
${destination}`;
}

async function run(where: Where, tap: Record<string, number>, ...flags: string[]) {
  return runWith(pipeline(where, tap), ...flags);
}

async function runWith(yaml: string, ...flags: string[]) {
  const config = await writeYaml(dir, 'p.yaml', yaml);
  const out = await cli(['run', config, '--json', ...flags]);
  return { ...out, config, stream: out.stdout ? JSON.parse(out.stdout).streams[0] : undefined };
}

/** Every id of the destination, as it stands (duplicates kept). */
async function ids(where: Where): Promise<number[]> {
  if (where === 'duckdb') {
    const path = join(dir, 'w.duckdb');
    // A build not yet published leaves no table (its rows wait in a build table).
    if ((await duckdbQuery(path, `SELECT 1 FROM duckdb_tables() WHERE table_name = 'events'`)).length === 0) return [];
    return (await duckdbQuery(path, 'SELECT id FROM events ORDER BY id')).map((r) => Number(r.id));
  }
  return (await tableRows(dirLake(join(dir, 'lake')), 'groups', 'events', 'CAST(id AS VARCHAR)')).map(Number);
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe.each<Where>(['lake', 'duckdb'])('a >= Singer tap into %s (append)', (where) => {
  it('loads each record once: quiet re-run, growth, crash inside a group, --full, and the run after it', async () => {
    const first = await run(where, { count: 200 });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stream).toMatchObject({ rows_read: 200, rows_loaded: 200 });

    // Nothing new: the tap sends the bookmark's group of 40 again; none of it lands.
    const quiet = await run(where, { count: 200 });
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stream).toMatchObject({ rows_read: 0, rows_loaded: 0, rows_resent: 40 });
    expect(await ids(where)).toEqual(range(200));

    // 45 more: the last group fills up (ids 201..240 share one updated_at) and a new one starts.
    const grown = await run(where, { count: 245 });
    expect(grown.stream).toMatchObject({ rows_loaded: 45 });
    expect(await ids(where)).toEqual(range(245));

    // The tap dies inside a group: what committed is the records before its last STATE, and the next run re-sends
    // that group from the bookmark; only the records not yet committed land.
    const crashed = await run(where, { count: 400, crash_after: 80 });
    expect(crashed.code).toBe(1);
    const partial = await ids(where);
    expect(new Set(partial).size).toBe(partial.length);
    expect(partial.length).toBeGreaterThan(245);
    const resumed = await run(where, { count: 400 });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await ids(where)).toEqual(range(400));

    // A full refresh rebuilds from the tap's start and keeps its last bookmark: the next run is incremental.
    const full = await run(where, { count: 400 }, '--full');
    expect(full.code, full.stderr).toBe(0);
    expect(full.stream).toMatchObject({ rows_loaded: 400, full: true });
    const exported = await cli(['state', 'export', '--config', full.config]);
    expect(JSON.parse(exported.stdout)).toEqual({ bookmarks: { events: { updated_at: '2024-01-01T00:00:09.000001Z' } } });
    const after = await run(where, { count: 400 });
    expect(after.stream).toMatchObject({ rows_loaded: 0, rows_resent: 40 });
    expect(await ids(where)).toEqual(range(400));
    if (where === 'lake') {
      const lake = dirLake(join(dir, 'lake'));
      expect(await orphans(lake, 'groups')).toEqual([]);
      expect((await committed(lake, 'groups'))?.manifest.tables.events?.files.length).toBeGreaterThan(0);
    }
  }, 240_000);
});

describe.each<Where>(['lake', 'duckdb'])('a >= Singer tap as a full stream into %s', (where) => {
  it('resumes a build that crashed inside a group without writing the re-sent records of its bookmark twice', async () => {
    // STATE every 15 records falls inside the groups of 40; the build commits at them and the tap dies after 80.
    const full = (tap: Record<string, number>) => runWith(pipeline(where, tap, 'strategy: full'));
    const crashed = await full({ count: 200, crash_after: 80 });
    expect(crashed.code).toBe(1);
    expect(await ids(where)).toEqual([]);
    const resumed = await full({ count: 200 });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stream.rows_resent).toBeGreaterThan(0);
    expect(await ids(where)).toEqual(range(200));
    // The next full run rebuilds from the start: every record once again.
    const again = await full({ count: 200 });
    expect(again.stream).toMatchObject({ rows_loaded: 200, full: true });
    expect(await ids(where)).toEqual(range(200));
  }, 120_000);
});

describe('Singer number types', () => {
  it('maps a number with multipleOf and bounds (tap-postgres numeric(12,2)) to DECIMAL(12,2)', async () => {
    const out = await run('duckdb', { count: 3 });
    expect(out.code, out.stderr).toBe(0);
    const columns = await duckdbQuery(join(dir, 'w.duckdb'), `SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'events' ORDER BY ordinal_position`);
    expect(Object.fromEntries(columns.map((c) => [c.column_name, c.data_type]))).toMatchObject({ id: 'BIGINT', amount: 'DECIMAL(12,2)', updated_at: 'TIMESTAMP WITH TIME ZONE' });
    expect((await duckdbQuery(join(dir, 'w.duckdb'), 'SELECT CAST(amount AS VARCHAR) AS a FROM events ORDER BY id')).map((r) => r.a)).toEqual(['1.01', '2.02', '3.03']);
  });
});

describe('a >= tap piped into tidemark target', () => {
  it('checkpoints inside a group lose nothing, and the next session with the emitted state duplicates nothing', async () => {
    const { spawn } = await import('node:child_process');
    const { writeFile } = await import('node:fs/promises');
    const { BIN } = await import('../../helpers/cli.js');
    const target = join(dir, 'w.duckdb');
    const config = await writeYaml(dir, 't.yaml', `name: sink\nstreams:\n  - name: events\n    checkpoint_rows: 10\ndestination:\n  type: duckdb\n  path: ${JSON.stringify(target)}\n`);
    const session = async (count: number, state?: string): Promise<string[]> => {
      const tapConfig = join(dir, 'tap.json');
      await writeFile(tapConfig, JSON.stringify({ count, state_every: 15 }));
      const args = [TAP, '--config', tapConfig];
      if (state !== undefined) {
        await writeFile(join(dir, 'state.json'), state);
        args.push('--state', join(dir, 'state.json'));
      }
      const tap = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'ignore'] });
      const sink = spawn(process.execPath, [BIN, 'target', '--config', config], { stdio: ['pipe', 'pipe', 'pipe'] });
      tap.stdout.pipe(sink.stdin);
      let out = '';
      let err = '';
      sink.stdout.on('data', (d: Buffer) => (out += d.toString()));
      sink.stderr.on('data', (d: Buffer) => (err += d.toString()));
      const code = await new Promise<number | null>((resolve) => sink.on('close', resolve));
      expect(code, err).toBe(0);
      return out.trim().split('\n');
    };
    const states = await session(200);
    expect(await ids('duckdb')).toEqual(range(200));
    await session(230, states.at(-1));
    expect(await ids('duckdb')).toEqual(range(230));
  }, 120_000);
});
