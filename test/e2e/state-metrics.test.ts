/**
 * `tidemark ui`'s `/metrics` reports every pipeline's state, whoever ran it: runs started from the command line (not
 * from the dashboard) show as `tidemark_state_*` gauges at the next scrape. Inputs cross boundaries: 6,000 rows
 * committed every 2,000, a second run failing right after its first commit (failpoint load.after_commit), three Parquet partitions, and a
 * pipeline file that does not load.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../fixtures/taxi.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { parsePrometheus, type PromScrape } from '../helpers/prometheus.js';
import { createItems, itemRange, pipelineYaml } from '../helpers/shop.js';
import { startUi } from './ui/helpers.js';

const ROWS = 6000;
let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await tempDir('tidemark-state-metrics-')));
afterAll(() => cleanup());

async function scrape(url: string): Promise<PromScrape> {
  const response = await fetch(`${url}metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
  return parsePrometheus(await response.text());
}

interface RunRow {
  readonly stream: string;
  readonly outcome: string;
  readonly rows_loaded: number;
  readonly rows_read: number;
  readonly started_at: string;
  readonly finished_at: string;
}

async function runs(config: string): Promise<RunRow[]> {
  const out = await cli(['runs', '--config', config, '--json']);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout) as RunRow[];
}

describe('tidemark ui /metrics: state gauges', () => {
  it('reports runs made outside the dashboard: status, rows, last success, freshness, partitions', async () => {
    const shop = join(dir, 'shop');
    await mkdir(shop, { recursive: true });
    createItems(join(shop, 'source.sqlite'), itemRange(1, ROWS, 3));
    const items = await writeYaml(shop, 'items.yaml', pipelineYaml({ source: join(shop, 'source.sqlite'), destination: { type: 'duckdb', path: join(shop, 'w.duckdb') }, stream: { checkpoint_rows: 2000 } }));
    await mkdir(join(shop, 'trips'), { recursive: true });
    for (const m of [1, 2, 3]) await writeTaxiMonth(join(shop, 'trips', `yellow_tripdata_2024-0${m}.parquet`), { year: 2024, month: m, rows: 500, seed: m });
    const trips = await writeYaml(
      shop,
      'trips.yaml',
      `name: trips
source: { type: files, location: ${JSON.stringify(shop)} }
streams:
  - name: trips
    pattern: trips/yellow_tripdata_{month}.parquet
    partition_column: month
destination: { type: sqlite, path: ${JSON.stringify(join(shop, 'trips.sqlite'))} }
`,
    );
    await writeFile(join(shop, 'broken.yaml'), 'name: broken\nsource: { type: sqlite }\n');

    const first = await cli(['run', items]);
    expect(first.code, first.stderr).toBe(0);
    createItems(join(shop, 'source.sqlite'), itemRange(ROWS + 1, ROWS, 3, 1_000_000));
    const failing = await cli(['run', items], { env: { TIDEMARK_FAILPOINTS: 'load.after_commit=1:throw' } });
    expect(failing.code, failing.stderr).toBe(1);
    const partitioned = await cli(['run', trips]);
    expect(partitioned.code, partitioned.stderr).toBe(0);

    const ui = await startUi([shop]);
    try {
      const s = await scrape(ui.url);
      const at = { pipeline: 'items', stream: 'items' };
      expect(s.types.get('tidemark_state_run_count')).toBe('gauge');
      expect(s.value('tidemark_state_up', { pipeline: 'items' })).toBe(1);
      expect(s.value('tidemark_state_up', { pipeline: 'trips' })).toBe(1);
      expect(s.find('tidemark_state_up').filter((x) => x.value === 0)).toHaveLength(1);
      expect(s.value('tidemark_state_running', { pipeline: 'items' })).toBe(0);
      expect(s.value('tidemark_state_run_count', at)).toBe(2);

      const recorded = await runs(items);
      const [newest, older] = recorded;
      expect(recorded).toHaveLength(2);
      expect(newest!.outcome).toBe('failed');
      expect(s.value('tidemark_state_last_run_status', { ...at, status: 'failed' })).toBe(1);
      expect(s.value('tidemark_state_last_run_status', { ...at, status: 'committed' })).toBe(0);
      expect(s.value('tidemark_state_last_run_rows_loaded', at)).toBe(newest!.rows_loaded);
      expect(s.value('tidemark_state_last_run_rows_read', at)).toBe(newest!.rows_read);
      expect(s.value('tidemark_state_rows_loaded', at)).toBe(ROWS + newest!.rows_loaded);
      // The failed run committed its first checkpoint (run_count 2 above); the last success is still the first run.
      expect(s.value('tidemark_state_last_success_timestamp_seconds', at)).toBeCloseTo(Date.parse(older!.finished_at) / 1000, 2);
      expect(s.value('tidemark_state_last_run_timestamp_seconds', at)).toBeCloseTo(Date.parse(newest!.started_at) / 1000, 2);
      expect(s.value('tidemark_state_checked_age_seconds', at)).toBeGreaterThanOrEqual(0);
      // The newest committed row is from 2024: its age in seconds, however long ago the run was.
      expect(s.value('tidemark_state_freshness_seconds', at)).toBeGreaterThan(3600 * 24 * 300);
      expect(s.value('tidemark_state_version', { pipeline: 'items' })).toBeGreaterThanOrEqual(4);

      const trip = { pipeline: 'trips', stream: 'trips' };
      expect(s.value('tidemark_state_partitions_loaded', trip)).toBe(3);
      expect(s.value('tidemark_state_rows_loaded', trip)).toBe(1500);
      expect(s.value('tidemark_state_last_run_status', { ...trip, status: 'committed' })).toBe(1);

      // Evaluated per scrape: a run from the command line while the dashboard is up shows at the next one.
      const again = await cli(['run', items]);
      expect(again.code, again.stderr).toBe(0);
      await new Promise((r) => setTimeout(r, 1200));
      const after = await scrape(ui.url);
      expect(after.value('tidemark_state_run_count', at)).toBe(3);
      expect(after.value('tidemark_state_last_run_status', { ...at, status: 'committed' })).toBe(1);
      expect(after.value('tidemark_state_rows_loaded', at)).toBe((await runs(items)).reduce((n, r) => n + r.rows_loaded, 0));
      expect(after.value('tidemark_state_last_run_rows_loaded', at)).toBe((await runs(items))[0]!.rows_loaded);
    } finally {
      await ui.stop();
    }
  }, 180_000);
});
