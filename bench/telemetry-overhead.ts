/**
 * Telemetry overhead: the same full load (SQLite → DuckDB, committed every 100,000 rows) with OpenTelemetry off and
 * on (OTEL_EXPORTER_OTLP_ENDPOINT at a local OTLP/HTTP receiver in this script), pair by pair. Sound against a
 * shared, noisy machine:
 * - one warm-up pair first, not counted (page cache, DuckDB and Node's code cache);
 * - the order inside a pair alternates (off→on, on→off, …), so a drift of load or a cache that favours the second
 *   run of a pair shifts half the pairs each way;
 * - the figure is the median of the pairs' on/off ratios, with their quartiles (a spread wider than the 3 % budget
 *   says the machine was too noisy to tell, not that telemetry costs that much);
 * - every run is checked: each loads all rows, an "on" run exports to the receiver, an "off" run sends nothing;
 * - each run's CPU seconds (user + system) give a second ratio, far steadier than wall time under load.
 *
 * Usage: npm run build && npx tsx bench/telemetry-overhead.ts [--rows 1000000] [--reps 7]
 * Prints one BENCH_RESULT line (JSON) for bench/run.ts.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { arg, BIN, timed } from './pair-bench.js';

const ROWS = Number(arg('rows', '1000000'));
const REPS = Number(arg('reps', '7'));
if (!Number.isInteger(REPS) || REPS < 1) throw new Error(`--reps: expected a positive integer, got ${arg('reps', '7')}`);

const dir = await mkdtemp(join(tmpdir(), 'tidemark-bench-telemetry-'));
const source = join(dir, 'source.sqlite');
const db = new Database(source);
db.pragma('journal_mode = WAL');
db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, updated_at TIMESTAMP NOT NULL, amount TEXT NOT NULL, note TEXT)');
const insert = db.prepare('INSERT INTO items VALUES (?, ?, ?, ?)');
db.transaction(() => {
  const base = Date.UTC(2024, 0, 1);
  for (let i = 1; i <= ROWS; i += 1) insert.run(i, new Date(base + i * 1000).toISOString().replace('T', ' ').replace('Z', '000'), `${i}.${i % 100}`, `note ${i % 997}`);
})();
db.close();

let received = 0;
const receiver = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    received += 1;
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end('{}');
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const endpoint = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;

interface Cost {
  readonly wall: number;
  /** user + system CPU seconds: on a busy machine wall time swings by tens of percent between identical runs, CPU far less. */
  readonly cpu: number;
}

async function load(label: 'off' | 'on', env: Record<string, string>): Promise<Cost> {
  const target = join(dir, `${label}.duckdb`);
  await rm(target, { force: true });
  await rm(`${target}.wal`, { force: true });
  const config = join(dir, `${label}.yaml`);
  await writeFile(
    config,
    `name: bench\nsource: { type: sqlite, path: ${JSON.stringify(source)} }\nstreams:\n  - { table: items, primary_key: id, cursor: updated_at, checkpoint_rows: 100000 }\ndestination: { type: duckdb, path: ${JSON.stringify(target)} }\n`,
  );
  const before = received;
  const t = await timed(process.execPath, [BIN, 'run', config, '--json'], { OTEL_EXPORTER_OTLP_ENDPOINT: '', ...env }, dir);
  const loaded = (JSON.parse(t.stdout) as { streams: { rows_loaded: number }[] }).streams[0]?.rows_loaded;
  if (loaded !== ROWS) throw new Error(`telemetry ${label}: loaded ${loaded} rows, expected ${ROWS}`);
  const exports = received - before;
  if (label === 'on' && exports === 0) throw new Error('telemetry on: the run sent nothing to the receiver');
  if (label === 'off' && exports !== 0) throw new Error(`telemetry off: the run sent ${exports} exports`);
  return { wall: t.seconds, cpu: t.cpuSeconds };
}

/** Off and on, in the order given; seconds of each. */
async function pair(offFirst: boolean): Promise<{ off: Cost; on: Cost }> {
  const on = { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint };
  if (offFirst) {
    const off = await load('off', {});
    return { off, on: await load('on', on) };
  }
  const onSeconds = await load('on', on);
  return { off: await load('off', {}), on: onSeconds };
}

/** The q-quantile by linear interpolation between the closest ranks (q = 0.5: the median, even counts averaged). */
function quantile(xs: readonly number[], q: number): number {
  const sorted = [...xs].sort((a, b) => a - b);
  const at = (sorted.length - 1) * q;
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (at - lo);
}

const warm = await pair(true);
process.stderr.write(`warm-up (not counted): off ${warm.off.wall.toFixed(2)} s, on ${warm.on.wall.toFixed(2)} s\n`);
const ratios: number[] = [];
const cpuRatios: number[] = [];
const off: number[] = [];
const on: number[] = [];
for (let rep = 0; rep < REPS; rep += 1) {
  const offFirst = rep % 2 === 0;
  const p = await pair(offFirst);
  off.push(p.off.wall);
  on.push(p.on.wall);
  ratios.push(p.on.wall / p.off.wall);
  cpuRatios.push(p.on.cpu / p.off.cpu);
  process.stderr.write(
    `pair ${rep + 1} (${offFirst ? 'off→on' : 'on→off'}): off ${p.off.wall.toFixed(2)} s (cpu ${p.off.cpu.toFixed(2)} s), ` +
      `on ${p.on.wall.toFixed(2)} s (cpu ${p.on.cpu.toFixed(2)} s): wall ${((p.on.wall / p.off.wall - 1) * 100).toFixed(1)} %, ` +
      `cpu ${((p.on.cpu / p.off.cpu - 1) * 100).toFixed(1)} %\n`,
  );
}
receiver.close();
await rm(dir, { recursive: true, force: true });
const round = (x: number, digits = 4) => Number(x.toFixed(digits));
const [q1, median, q3] = [0.25, 0.5, 0.75].map((q) => quantile(ratios, q)) as [number, number, number];
console.log(
  `BENCH_RESULT ${JSON.stringify({
    rows: ROWS,
    reps: REPS,
    off_s: round(quantile(off, 0.5), 3),
    on_s: round(quantile(on, 0.5), 3),
    on_vs_off: round(median),
    on_vs_off_q1: round(q1),
    on_vs_off_q3: round(q3),
    overhead_pct: round((median - 1) * 100, 2),
    ratios: ratios.map((r) => round(r)),
    cpu_on_vs_off: round(quantile(cpuRatios, 0.5)),
    cpu_on_vs_off_q1: round(quantile(cpuRatios, 0.25)),
    cpu_on_vs_off_q3: round(quantile(cpuRatios, 0.75)),
    exports_received: received,
  })}`,
);
