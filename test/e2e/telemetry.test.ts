/**
 * OpenTelemetry: with OTEL_EXPORTER_OTLP_ENDPOINT set, a run sends a span per run, stream and commit and the run's
 * metrics to a local OTLP/HTTP receiver; without it nothing is sent. Inputs cross boundaries: 6,000 rows committed
 * every 2,000 (several commits, more rows than one DuckDB chunk), and three Parquet partitions.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../fixtures/taxi.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { createItems, itemRange, pipelineYaml } from '../helpers/shop.js';

let dir: string;
let cleanup: () => Promise<void>;
let receiver: OtlpReceiver;
let items: string;
let trips: string;
const ROWS = 6000;

beforeAll(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-telemetry-'));
  receiver = await startOtlpReceiver();
  createItems(join(dir, 'shop.sqlite'), itemRange(1, ROWS, 3));
  items = await writeYaml(
    dir,
    'items.yaml',
    pipelineYaml({ source: join(dir, 'shop.sqlite'), destination: { type: 'duckdb', path: join(dir, 'items.duckdb') }, stream: { checkpoint_rows: 2000 } }),
  );
  await mkdir(join(dir, 'trips'), { recursive: true });
  for (const m of [1, 2, 3]) await writeTaxiMonth(join(dir, 'trips', `yellow_tripdata_2024-0${m}.parquet`), { year: 2024, month: m, rows: 2500, seed: m });
  trips = await writeYaml(
    dir,
    'trips.yaml',
    `name: trips
source: { type: files, location: ${JSON.stringify(dir)} }
streams:
  - name: trips
    pattern: trips/yellow_tripdata_{month}.parquet
    partition_column: month
destination: { type: sqlite, path: ${JSON.stringify(join(dir, 'trips.sqlite'))} }
`,
  );
}, 120_000);
afterAll(async () => {
  await receiver.close();
  await cleanup();
});

const otel = () => ({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_SERVICE_NAME: 'tidemark-test' });
const byName = (spans: readonly ReceivedSpan[], name: string) => spans.filter((s) => s.name === name);
function points(metric: string, pipeline: string) {
  return receiver.points.filter((p) => p.metric === metric && p.attributes.pipeline === pipeline);
}

describe('OpenTelemetry export', () => {
  it('sends nothing when no OTEL_* variable asks for it', async () => {
    const out = await cli(['run', items, '--json'], { env: { OTEL_EXPORTER_OTLP_ENDPOINT: '' } });
    expect(out.code, out.stderr).toBe(0);
    expect(receiver.requests).toEqual([]);
    // Loads the first 6,000 rows: later runs of this file see no new rows unless they add some.
  });

  it('sends a run span, a stream span and a span per commit, and the run metrics', async () => {
    createItems(join(dir, 'shop.sqlite'), itemRange(ROWS + 1, ROWS, 3, 1_000_000));
    const out = await cli(['run', items, '--json'], { env: otel() });
    expect(out.code, out.stderr).toBe(0);
    const result = JSON.parse(out.stdout) as { run_id: string; streams: { rows_read: number; commits: number; cursor_max: string }[] };
    const stream = result.streams[0]!;
    expect(stream.rows_read).toBe(ROWS);
    expect(stream.commits).toBeGreaterThanOrEqual(3);

    const runSpans = byName(receiver.spans, 'tidemark.run').filter((s) => s.attributes['tidemark.run_id'] === result.run_id);
    expect(runSpans).toHaveLength(1);
    const run = runSpans[0]!;
    expect(run.service).toBe('tidemark-test');
    expect(run.attributes).toMatchObject({ 'tidemark.pipeline': 'items', 'tidemark.rows_read': ROWS, 'tidemark.rows_loaded': ROWS, 'tidemark.rows_rejected': 0 });
    const streamSpans = byName(receiver.spans, 'tidemark.stream').filter((s) => s.parentSpanId === run.spanId);
    expect(streamSpans).toHaveLength(1);
    expect(streamSpans[0]!.attributes).toMatchObject({ 'tidemark.stream': 'items', 'tidemark.outcome': 'committed', 'tidemark.rows_loaded': ROWS, 'tidemark.commits': stream.commits });
    const commits = byName(receiver.spans, 'tidemark.commit').filter((s) => s.parentSpanId === streamSpans[0]!.spanId);
    expect(commits).toHaveLength(stream.commits);
    // Each commit's run record counts what is durable so far: the last one holds the whole read.
    const loaded = commits.map((c) => c.attributes['tidemark.rows_loaded'] as number).sort((a, b) => a - b);
    expect(loaded.at(-1)).toBe(ROWS);
    for (const c of commits) expect(c.traceId).toBe(run.traceId);
    for (const c of commits) expect(c.endNs >= c.startNs).toBe(true);

    expect(points('tidemark.rows.read', 'items').reduce((n, p) => n + p.value, 0)).toBe(ROWS);
    expect(points('tidemark.rows.loaded', 'items').reduce((n, p) => n + p.value, 0)).toBe(ROWS);
    expect(points('tidemark.commits', 'items').reduce((n, p) => n + p.value, 0)).toBe(stream.commits);
    const commitLatency = points('tidemark.commit.duration_seconds', 'items');
    expect(commitLatency.map((p) => [p.unit, p.count])).toEqual([['s', stream.commits]]);
    expect(points('tidemark.run.duration_seconds', 'items')).toEqual([expect.objectContaining({ unit: 's', count: 1, attributes: { pipeline: 'items', outcome: 'committed' } })]);
    // The newest row is from 2024: its age is now minus its cursor value, in seconds.
    const [freshness] = points('tidemark.freshness_seconds', 'items');
    const expected = (Date.now() - Date.parse(`${stream.cursor_max.replace(' ', 'T')}Z`)) / 1000;
    expect(freshness!.value).toBeGreaterThan(expected - 600);
    expect(freshness!.value).toBeLessThanOrEqual(expected);
  }, 120_000);

  it('puts the partitions and their bytes on a partitioned stream’s commit spans', async () => {
    const out = await cli(['run', trips, '--json'], { env: otel() });
    expect(out.code, out.stderr).toBe(0);
    const result = JSON.parse(out.stdout) as { run_id: string; streams: { partitions_loaded: string[]; rows_loaded: number }[] };
    expect(result.streams[0]!.rows_loaded).toBe(7500);
    const run = byName(receiver.spans, 'tidemark.run').find((s) => s.attributes['tidemark.run_id'] === result.run_id)!;
    const stream = byName(receiver.spans, 'tidemark.stream').find((s) => s.parentSpanId === run.spanId)!;
    expect(stream.attributes['tidemark.partitions']).toEqual(result.streams[0]!.partitions_loaded);
    const commits = byName(receiver.spans, 'tidemark.commit').filter((s) => s.parentSpanId === stream.spanId);
    expect(commits.flatMap((c) => c.attributes['tidemark.partitions'] as string[]).sort()).toEqual([...result.streams[0]!.partitions_loaded].sort());
    for (const c of commits) expect(c.attributes['tidemark.bytes'] as number).toBeGreaterThan(10_000);
  }, 120_000);

  it('marks a failed stream’s span as an error and counts the failed run', async () => {
    createItems(join(dir, 'shop.sqlite'), itemRange(2 * ROWS + 1, ROWS, 3, 2_000_000));
    const out = await cli(['run', items], { env: { ...otel(), TIDEMARK_FAILPOINTS: 'load.after_write=2:throw' } });
    expect(out.code, out.stderr).toBe(1);
    const failedStreams = byName(receiver.spans, 'tidemark.stream').filter((s) => s.attributes['tidemark.outcome'] === 'failed');
    expect(failedStreams).toHaveLength(1);
    expect(failedStreams[0]!.status.code).toBe(2);
    expect(failedStreams[0]!.status.message).toContain('failpoint');
    expect(points('tidemark.runs', 'items').filter((p) => p.attributes.outcome === 'failed').map((p) => p.value)).toEqual([1]);
  }, 120_000);
});
