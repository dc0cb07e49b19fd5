/**
 * Habits users bring from PyCharter, DataSpoc Pipe and PyAirbyte, through the built CLI against real SQLite and
 * DuckDB files: one error line per failure, pipelines named by `name:` in a pipelines folder, every run recorded.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml, upsertItems } from '../helpers/shop.js';

describe('CLI habits', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => ({ dir, cleanup } = await tempDir()));
  afterAll(() => cleanup());

  it('prints a failed stream once, on one line naming pipeline, stream and phase', async () => {
    const source = join(dir, 'errors.sqlite');
    createItems(source, itemRange(1, 300, 7));
    const file = await writeYaml(
      dir,
      'errors.yaml',
      pipelineYaml({ name: 'errs', source, destination: { type: 'duckdb', path: join(dir, 'errors.duckdb') }, stream: { checkpoint_rows: 50 } }).replace(
        'streams:\n',
        'streams:\n  - table: missing\n    primary_key: [id]\n    cursor: updated_at\n',
      ),
    );
    const out = await cli(['run', file]);
    expect(out.code).toBe(1);
    const all = `${out.stdout}${out.stderr}`;
    expect(all.split('table missing does not exist')).toHaveLength(2);
    const line = all.split('\n').find((l) => l.includes('table missing does not exist'))!;
    expect(line).toMatch(/^errs\.missing: FAILED: pipeline errs, stream missing, phase discover: table missing does not exist/);
    expect(out.stderr).toContain(line);
    expect(out.stdout).toContain('errs.items: 300 read, 300 loaded');
  }, 240_000);

  it('finds pipelines by name: in --dir, $TIDEMARK_PIPELINES_DIR or ./pipelines; a folder runs each; an unknown name lists the known', async () => {
    const home = join(dir, 'named');
    const folder = join(home, 'pipelines');
    await mkdir(folder, { recursive: true });
    for (const name of ['pg-orders', 'pg-customers']) {
      const source = join(home, `${name}.sqlite`);
      createItems(source, itemRange(1, 240, 9));
      await writeYaml(folder, `${name.replace('pg-', '')}.yaml`, pipelineYaml({ name, source, destination: { type: 'duckdb', path: join(home, `${name}.duckdb`) }, stream: { checkpoint_rows: 40 } }));
    }
    // By name, from ./pipelines (the default folder).
    const one = await cli(['run', 'pg-orders'], { cwd: home });
    expect(one.stderr).not.toContain('error');
    expect(one.code).toBe(0);
    expect(one.stdout).toContain('pg-orders.items: 240 read, 240 loaded, 0 rejected in 6 commits');
    expect(one.stdout).not.toContain('pg-customers');
    // No name: every pipeline of the folder; a folder given: the same.
    const all = await cli(['run'], { cwd: home });
    expect(all.code).toBe(0);
    expect(all.stdout).toContain('pg-customers.items: 240 read');
    expect(all.stdout).toContain('pg-orders.items: 0 read');
    const folderRun = await cli(['run', folder]);
    expect(folderRun.code).toBe(0);
    expect(folderRun.stdout.match(/\.items: 0 read/g)).toHaveLength(2);
    // From elsewhere: --dir, or the environment variable.
    upsertItems(join(home, 'pg-orders.sqlite'), itemRange(241, 5, 9));
    const viaDir = await cli(['run', 'pg-orders', '--dir', folder], { cwd: dir });
    expect(viaDir.stdout).toContain('pg-orders.items: 5 read, 5 loaded');
    const viaEnv = await cli(['plan', 'pg-orders', 'pg-customers', '--json'], { cwd: dir, env: { TIDEMARK_PIPELINES_DIR: folder } });
    expect(viaEnv.code).toBe(0);
    expect(viaEnv.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { stream: string }[])[0]!.stream)).toEqual(['items', 'items']);
    const unknown = await cli(['run', 'pg-order'], { cwd: home });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr.trim()).toBe('error: no pipeline named pg-order in pipelines (pipelines: pg-customers, pg-orders); give a file, a folder, --dir or TIDEMARK_PIPELINES_DIR');
    // The commands that take --config take a name too.
    const validated = await cli(['validate'], { cwd: home });
    expect(validated.code).toBe(0);
    expect(validated.stdout).toContain('pipeline pg-orders is valid');
    const runs = await cli(['runs', 'pg-orders', '--json'], { cwd: home });
    expect(runs.code).toBe(0);
    expect((JSON.parse(runs.stdout) as unknown[]).length).toBeGreaterThan(0);
    const shown = await cli(['state', 'show', '--config', 'pg-orders', '--json'], { cwd: home });
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({ pipeline: 'pg-orders' });
    const byFlag = await cli(['state', 'show', '-p', 'pg-customers'], { cwd: home });
    expect(byFlag.stdout).toContain('pipeline pg-customers, state version');
    const ledger = await cli(['ledger', 'list', '--pipeline', 'pg-orders'], { cwd: home });
    expect(ledger.stderr).not.toContain('no pipeline named');
  }, 240_000);

  it('every run is recorded, quiet ones too; state carries run_count, last_run_at, last_run_id and metadata', async () => {
    const source = join(dir, 'marks.sqlite');
    createItems(source, itemRange(1, 260, 11));
    const file = await writeYaml(dir, 'marks.yaml', pipelineYaml({ name: 'marks', source, destination: { type: 'duckdb', path: join(dir, 'marks.duckdb') }, stream: { checkpoint_rows: 45 } }));
    const runIds: string[] = [];
    const runOnce = async (): Promise<{ run_id: string; streams: { rows_read: number; commits: number }[] }> => {
      const out = await cli(['run', file, '--json']);
      expect(out.code, out.stderr).toBe(0);
      const result = JSON.parse(out.stdout) as { run_id: string; streams: { rows_read: number; commits: number }[] };
      runIds.push(result.run_id);
      return result;
    };
    expect((await runOnce()).streams[0]).toMatchObject({ rows_read: 260, commits: 5 });
    expect((await runOnce()).streams[0]).toMatchObject({ rows_read: 0, commits: 0 });
    const meta = await cli(['state', 'set', 'items', '--meta', 'ownerTeam=data', '--meta', 'ticket=PC-12', '--config', file, '--json']);
    expect(meta.code, meta.stderr).toBe(0);
    expect((JSON.parse(meta.stdout) as { streams: Record<string, { metadata: unknown }> }).streams.items!.metadata).toEqual({ ownerTeam: 'data', ticket: 'PC-12' });
    expect((await runOnce()).streams[0]).toMatchObject({ rows_read: 0, commits: 0 });
    upsertItems(source, itemRange(261, 100, 11));
    expect((await runOnce()).streams[0]).toMatchObject({ rows_read: 100 });

    const runs = JSON.parse((await cli(['runs', '--config', file, '--json'])).stdout) as { run_id: string; rows_read: number; outcome: string }[];
    expect(runs.map((r) => r.run_id)).toEqual([...runIds].reverse());
    expect(runs.map((r) => r.rows_read)).toEqual([100, 0, 0, 260]);
    expect(runs.every((r) => r.outcome === 'committed')).toBe(true);

    const shown = JSON.parse((await cli(['state', 'show', '--config', file, '--json'])).stdout) as { streams: Record<string, Record<string, unknown>> };
    const items = shown.streams.items!;
    expect(items).toMatchObject({ run_count: 4, last_run_id: runIds[3], metadata: { ownerTeam: 'data', ticket: 'PC-12' } });
    expect(Date.parse(String(items.last_run_at))).toBeGreaterThan(0);
    const text = await cli(['state', 'show', '--config', file]);
    expect(text.stdout).toContain(`; 4 runs, last ${String(items.last_run_at)} (run ${runIds[3]})`);
    expect(text.stdout).toContain('metadata: ownerTeam=data, ticket=PC-12');
    // A key removed with key=; the watermark set by hand keeps the marks and the metadata.
    await cli(['state', 'set', 'items', '--meta', 'ticket=', '--config', file]);
    const set = await cli(['state', 'set', 'items', '--cursor', '2024-01-01 00:00:05', '--config', file, '--json']);
    expect(set.code, set.stderr).toBe(0);
    expect((JSON.parse(set.stdout) as { streams: Record<string, Record<string, unknown>> }).streams.items).toMatchObject({ run_count: 4, metadata: { ownerTeam: 'data' } });
    const history = (await cli(['state', 'history', '--config', file])).stdout;
    expect(history).toContain('run (nothing new)');
    expect(history).toContain('metadata of items');
  }, 240_000);

  it('run --until: reads stop at the caller\'s bound, typed by the cursor; the watermark never passes it', async () => {
    const source = join(dir, 'until.sqlite');
    createItems(source, itemRange(1, 300, 7));
    const file = await writeYaml(dir, 'until.yaml', pipelineYaml({ name: 'until', source, destination: { type: 'duckdb', path: join(dir, 'until.duckdb') }, stream: { checkpoint_rows: 40 } }));
    type Result = { streams: { rows_read: number; watermark: { cursor: { value: string }; pk: { value: string }[] } | null }[] };
    const runUntil = async (...extra: string[]): Promise<Result> => {
      const out = await cli(['run', file, '--json', ...extra]);
      expect(out.code, out.stderr).toBe(0);
      return JSON.parse(out.stdout) as Result;
    };
    // Every 7 ids share a second: ids 1..147 have seconds 0..20.
    const first = (await runUntil('--until', '2024-01-01 00:00:20')).streams[0]!;
    expect(first.rows_read).toBe(147);
    expect(first.watermark).toMatchObject({ cursor: { value: '2024-01-01 00:00:20.000000' }, pk: [{ value: '147' }] });
    // A bound below the watermark reads nothing and moves nothing back.
    const below = (await runUntil('--until', '2024-01-01 00:00:10')).streams[0]!;
    expect(below.rows_read).toBe(0);
    expect(below.watermark).toMatchObject({ cursor: { value: '2024-01-01 00:00:20.000000' }, pk: [{ value: '147' }] });
    // Typed by the cursor: a naive timestamp takes no zone; anything else is refused, naming the stream and phase.
    const zoned = await cli(['run', file, '--until', '2024-01-01T00:00:30Z']);
    expect(zoned.code).toBe(1);
    expect(zoned.stderr).toMatch(/until\.items: FAILED: pipeline until, stream items, phase plan: .*--until "2024-01-01T00:00:30Z" is not a timestamp value \(the cursor's type\)/);
    const bad = await cli(['run', file, '--until', 'yesterday']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('--until "yesterday" is not a timestamp value');
    const rest = (await runUntil()).streams[0]!;
    expect(rest.rows_read).toBe(153);
    expect(rest.watermark).toMatchObject({ pk: [{ value: '300' }] });
  }, 240_000);
});
