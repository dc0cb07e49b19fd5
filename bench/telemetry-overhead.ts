/**
 * Telemetry overhead: the same full load (SQLite → DuckDB, committed every 100,000 rows) with OpenTelemetry off and
 * on (OTEL_EXPORTER_OTLP_ENDPOINT at a local OTLP/HTTP receiver in this script), pair by pair (off, on, off, on, …);
 * the ratio is the median of the pairs' ratios, so a change of load during the run shifts both sides alike. Each
 * side's CPU seconds (user + system) are reported too: on a busy machine wall time swings by tens of percent between
 * identical runs, while the CPU a run spends barely moves, so the CPU ratio is the overhead figure to read there.
 *
 * Usage: npm run build && npx tsx bench/telemetry-overhead.ts [--rows 1000000] [--reps 5]
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
const REPS = Number(arg('reps', '5'));

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

async function load(label: string, env: Record<string, string>): Promise<{ wall: number; cpu: number }> {
  const target = join(dir, `${label}.duckdb`);
  await rm(target, { force: true });
  const config = join(dir, `${label}.yaml`);
  await writeFile(
    config,
    `name: bench\nsource: { type: sqlite, path: ${JSON.stringify(source)} }\nstreams:\n  - { table: items, primary_key: id, cursor: updated_at, checkpoint_rows: 100000 }\ndestination: { type: duckdb, path: ${JSON.stringify(target)} }\n`,
  );
  const t = await timed(process.execPath, [BIN, 'run', config], { OTEL_EXPORTER_OTLP_ENDPOINT: '', ...env }, dir);
  return { wall: t.seconds, cpu: t.cpuSeconds };
}

const ratios: number[] = [];
const cpuRatios: number[] = [];
const off: number[] = [];
const on: number[] = [];
for (let rep = 0; rep < REPS; rep += 1) {
  // Alternate which side goes first, so a load that rises through the run does not always favour one side.
  const first = rep % 2 === 0 ? 'off' : 'on';
  const runs = { off: { wall: 0, cpu: 0 }, on: { wall: 0, cpu: 0 } };
  for (const side of first === 'off' ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
    runs[side] = await load(side, side === 'on' ? { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint } : {});
  }
  const { off: a, on: b } = runs;
  off.push(a.wall);
  on.push(b.wall);
  ratios.push(b.wall / a.wall);
  cpuRatios.push(b.cpu / a.cpu);
  process.stderr.write(
    `pair ${rep + 1}: off ${a.wall.toFixed(2)} s (cpu ${a.cpu.toFixed(2)} s), on ${b.wall.toFixed(2)} s (cpu ${b.cpu.toFixed(2)} s): ` +
      `wall ${((b.wall / a.wall - 1) * 100).toFixed(1)} %, cpu ${((b.cpu / a.cpu - 1) * 100).toFixed(1)} %\n`,
  );
}
receiver.close();
await rm(dir, { recursive: true, force: true });
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
const quartiles = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  return [s[Math.floor((s.length - 1) / 4)]!, s[Math.ceil(((s.length - 1) * 3) / 4)]!].map((x) => Math.round(x * 1000) / 1000);
};
if (received === 0) throw new Error('telemetry on sent nothing to the receiver');
console.log(`BENCH_RESULT ${JSON.stringify({ rows: ROWS, reps: REPS, off_s: median(off), on_s: median(on), on_vs_off: median(ratios), on_vs_off_quartiles: quartiles(ratios), cpu_on_vs_off: median(cpuRatios), cpu_on_vs_off_quartiles: quartiles(cpuRatios), exports_received: received })}`);
