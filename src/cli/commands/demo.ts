/**
 * `tidemark demo`: a deterministic SQLite "shop" (orders updated in place, many sharing one timestamp) loaded
 * into DuckDB twice, showing that the second run moves only what changed. Starts fresh each time, so it is safe
 * to run again.
 */
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { loadPipeline, run, stateCommands } from '../../index.js';
import { formatCount, print } from '../output.js';
import { describeWatermark } from './run.js';

const PIPELINE_YAML = `# The demo pipeline: a SQLite shop into the embedded DuckDB default.
name: shop
source:
  type: sqlite
  path: ./shop.sqlite
streams:
  - table: orders
    primary_key: [id]
    cursor: updated_at          # tuple watermark (updated_at, id)
    write: merge
  - table: customers
    primary_key: [id]
    cursor: updated_at
destination:
  type: duckdb
  path: ./warehouse.duckdb
`;

/** A small seeded PRNG (mulberry32): the same shop on every machine. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function stamp(base: number, seconds: number): string {
  return new Date(base + seconds * 1000).toISOString().replace('T', ' ').replace('Z', '000');
}

const BASE = Date.UTC(2026, 0, 1, 8, 0, 0);
const STATUSES = ['placed', 'paid', 'shipped', 'delivered'];

export function createShop(path: string): void {
  const db = new Database(path);
  const rand = random(42);
  db.exec(`
    CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT, country TEXT, updated_at TIMESTAMP NOT NULL);
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, status TEXT NOT NULL,
      amount DECIMAL(12,2) NOT NULL, created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL);
  `);
  const insertCustomer = db.prepare('INSERT INTO customers VALUES (?, ?, ?, ?, ?)');
  const insertOrder = db.prepare('INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)');
  db.transaction(() => {
    for (let id = 1; id <= 500; id += 1) {
      insertCustomer.run(id, `Customer ${id}`, `c${id}@shop.example`, ['NL', 'DE', 'US', 'JP'][id % 4], stamp(BASE, id));
    }
    for (let id = 1; id <= 10_000; id += 1) {
      // Orders arrive about one per second, and often several in the same second: equal cursor values.
      const at = Math.floor(id * 0.7);
      const cents = 500 + Math.floor(rand() * 50_000);
      insertOrder.run(id, 1 + Math.floor(rand() * 500), 'placed', `${Math.floor(cents / 100)}.${String(cents % 100).padStart(2, '0')}`, stamp(BASE, at), stamp(BASE, at));
    }
  })();
  db.close();
}

/** The changes between the two runs: 25 orders move on, 12 new ones arrive in the same second, 3 customers move. */
export function changeShop(path: string): void {
  const db = new Database(path);
  const later = stamp(BASE, 86_400);
  db.transaction(() => {
    const update = db.prepare('UPDATE orders SET status = ?, updated_at = ? WHERE id = ?');
    for (let i = 0; i < 25; i += 1) update.run(STATUSES[1 + (i % 3)], later, 100 + i * 37);
    const insert = db.prepare('INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)');
    for (let id = 10_001; id <= 10_012; id += 1) insert.run(id, id % 500, 'placed', '19.99', later, later);
    const customer = db.prepare('UPDATE customers SET country = ?, updated_at = ? WHERE id = ?');
    for (const id of [7, 77, 177]) customer.run('FR', later, id);
  })();
  db.close();
}

export async function demoCommand(dir: string): Promise<number> {
  const root = resolve(dir);
  await mkdir(root, { recursive: true });
  for (const f of ['shop.sqlite', 'shop.sqlite-wal', 'shop.sqlite-shm', 'warehouse.duckdb', 'warehouse.duckdb.wal', 'warehouse.duckdb.locks']) {
    await rm(join(root, f), { recursive: true, force: true });
  }
  const file = join(root, 'pipeline.yaml');
  await writeFile(file, PIPELINE_YAML);
  createShop(join(root, 'shop.sqlite'));
  const pipeline = await loadPipeline(file);
  print(`demo: created ${join(dir, 'shop.sqlite')} (10,000 orders, 500 customers) and ${join(dir, 'pipeline.yaml')}`);

  const first = await run(pipeline);
  for (const s of first.streams) print(`run 1: ${s.stream}: ${formatCount(s.rowsLoaded)} rows moved (${s.outcome})`);
  changeShop(join(root, 'shop.sqlite'));
  print('demo: updated 25 orders, added 12 orders sharing one timestamp, moved 3 customers');
  const second = await run(pipeline);
  for (const s of second.streams) print(`run 2: ${s.stream}: ${formatCount(s.rowsLoaded)} rows moved (${s.outcome})`);
  const third = await run(pipeline);
  for (const s of third.streams) print(`run 3: ${s.stream}: ${formatCount(s.rowsLoaded)} rows moved (nothing changed)`);

  const state = await stateCommands(pipeline).show();
  print(`state (version ${state.version}):`);
  for (const [name, s] of Object.entries(state.streams)) print(`  ${name}: watermark (updated_at, id) = ${describeWatermark(s.watermark)}`);
  print(`warehouse: ${join(dir, 'warehouse.duckdb')} — try: npx tidemark state show --config ${file}`);
  return [first, second, third].every((r) => r.ok) ? 0 : 1;
}
