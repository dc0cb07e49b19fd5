/**
 * The dashboard warns about a log stream's replication slot that retains more WAL than `max_retained_wal`, as every
 * run does; a pipeline whose slot is within its limit shows no such warning.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import type { PgTestDb } from '../../integration/postgres/pg-db.js';
import { startUi, type RunningUi } from '../ui/helpers.js';
import { cdcPipelineYaml, createCdcDb, uniquePipeline } from './pg-cdc.js';

let root: string;
let cleanup: () => Promise<void>;
let db: PgTestDb;
let ui: RunningUi | undefined;
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir());
  db = await createCdcDb('cdcui');
});
afterAll(async () => {
  await ui?.stop();
  await db?.drop().catch(() => undefined);
  await cleanup();
});

describe('dashboard and max_retained_wal', () => {
  it('shows the warning for the slot over its limit only', async () => {
    await db.sql(`CREATE TABLE t (id bigint PRIMARY KEY, note text)`);
    await db.sql(`INSERT INTO t SELECT g, 'v1' FROM generate_series(1, 50) g`);
    const dir = join(root, 'pipelines');
    await mkdir(dir, { recursive: true });
    const pipeline = (name: string, extra: Record<string, unknown>) =>
      writeYaml(dir, `${name}.yaml`, cdcPipelineYaml({ name, url: db.url, destination: { type: 'duckdb', path: join(root, `${name}.duckdb`) }, streams: [{ table: 't', strategy: 'log', ...extra }] }));
    const [tightName, roomyName] = [uniquePipeline('tight'), uniquePipeline('roomy')];
    const tight = await pipeline(tightName, { max_retained_wal: 1 });
    const roomy = await pipeline(roomyName, {});
    for (const config of [tight, roomy]) expect((await cli(['run', config])).code).toBe(0);
    // WAL written after the runs is retained by both slots: over 1 byte, far under 1 GB.
    await db.sql(`INSERT INTO t SELECT g, 'v2' FROM generate_series(100, 400) g`);
    const warned = await cli(['run', tight]);
    expect(warned.stderr).toMatch(new RegExp(`replication slot tidemark_${tightName} retains .* of WAL \\(max_retained_wal 1 bytes\\)`));
    await db.sql(`INSERT INTO t SELECT g, 'v3' FROM generate_series(500, 800) g`);

    ui = await startUi([dir]);
    const overview = (await (await fetch(`${ui.url}api/overview`)).json()) as { pipelines: { name: string; warnings: string[] }[] };
    const by = Object.fromEntries(overview.pipelines.map((p) => [p.name, p.warnings]));
    expect(by[tightName]).toHaveLength(1);
    expect(by[tightName]![0]).toMatch(new RegExp(`^replication slot tidemark_${tightName} retains .* of WAL \\(max_retained_wal 1 bytes\\): run the pipeline more often`));
    expect(by[roomyName]).toEqual([]);
  }, 120_000);
});
