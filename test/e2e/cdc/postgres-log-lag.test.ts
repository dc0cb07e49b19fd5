/**
 * CDC lag of a `strategy: log` stream from Postgres: the source commit time of the newest change applied reaches the
 * run result (`log_commit_time`), the OTLP gauge `tidemark.cdc.lag_seconds` and the stream's committed state
 * (`log.commit_time`, which `tidemark ui`'s `/metrics` reads). Input crosses boundaries: a 230-row copy committed
 * every 40 rows, then 200 changes in ten source transactions applied over several 40-change checkpoints.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { writeYaml } from '../../helpers/fs.js';
import { startOtlpReceiver, type OtlpReceiver } from '../../helpers/otlp-receiver.js';
import { parsePrometheus } from '../../helpers/prometheus.js';
import { startUi } from '../ui/helpers.js';
import { cdcPipelineYaml, cdcWorkspace, uniquePipeline } from './pg-cdc.js';

const workspace = cdcWorkspace();
let receiver: OtlpReceiver;
beforeAll(async () => (receiver = await startOtlpReceiver()));
afterAll(() => receiver.close());

describe('strategy log: CDC lag', () => {
  it('is reported from the commit time of the newest change applied', async () => {
    const db = await workspace.db('cdclag');
    await db.sql(`CREATE TABLE items (id bigint PRIMARY KEY, note text)`);
    await db.sql(`INSERT INTO items SELECT g, 'note ' || g FROM generate_series(1, 230) AS g`);
    const dir = join(workspace.root(), 'lag');
    await mkdir(dir, { recursive: true });
    const name = uniquePipeline('lag');
    const config = await writeYaml(
      dir,
      'p.yaml',
      cdcPipelineYaml({ name, url: db.url, destination: { type: 'duckdb', path: join(dir, 'w.duckdb') }, streams: [{ table: 'public.items', strategy: 'log', checkpoint_rows: 40 }] }),
    );
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint };

    const copy = await cli(['run', '--json', config], { env: otel });
    expect(copy.code, copy.stderr).toBe(0);
    expect(JSON.parse(copy.stdout).streams[0].commits).toBeGreaterThanOrEqual(6);

    const before = Date.now();
    for (let t = 0; t < 10; t += 1) {
      await db.sql(`INSERT INTO items SELECT g, 'new ' || g FROM generate_series(${1000 + t * 20}, ${1000 + t * 20 + 19}) AS g`);
    }
    const lastCommit = (await db.sql(`SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') AS at`))[0]!.at as string;
    const changes = await cli(['run', '--json', config], { env: otel });
    expect(changes.code, changes.stderr).toBe(0);
    const stream = JSON.parse(changes.stdout).streams[0] as { rows_read: number; commits: number; log_commit_time?: string };
    expect(stream.rows_read).toBe(200);
    expect(stream.commits).toBeGreaterThanOrEqual(3);
    // The newest applied transaction committed after `before` and no later than the query that followed it.
    expect(stream.log_commit_time, changes.stdout).toBeDefined();
    const committedAt = Date.parse(stream.log_commit_time!);
    expect(committedAt).toBeGreaterThanOrEqual(before - 5_000);
    expect(committedAt).toBeLessThanOrEqual(Date.parse(`${lastCommit}Z`) + 1_000);

    const lag = receiver.points.filter((p) => p.metric === 'tidemark.cdc.lag_seconds' && p.attributes.pipeline === name);
    expect(lag.map((p) => [p.unit, p.attributes.stream])).toEqual([['s', 'items']]);
    expect(lag[0]!.value).toBeGreaterThanOrEqual(0);
    expect(lag[0]!.value).toBeLessThan((Date.now() - before) / 1000 + 5);

    const state = await cli(['state', 'show', '--config', config, '--json']);
    expect(state.code, state.stderr).toBe(0);
    expect(JSON.parse(state.stdout).streams.items.log.commit_time).toBe(stream.log_commit_time);

    // `tidemark ui`'s /metrics reads the same lag from the committed state, whoever ran the pipeline.
    const ui = await startUi([config]);
    try {
      const scraped = parsePrometheus(await (await fetch(`${ui.url}metrics`)).text());
      const stateLag = scraped.value('tidemark_state_cdc_lag_seconds', { pipeline: name, stream: 'items' });
      expect(stateLag).toBeGreaterThanOrEqual(0);
      expect(stateLag).toBeLessThan((Date.now() - before) / 1000 + 5);
    } finally {
      await ui.stop();
    }
  }, 180_000);
});
