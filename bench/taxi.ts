/**
 * A deterministic generator of NYC-yellow-taxi-like trips (shared/TAXI.md): the 19 columns with their types and
 * realistic value shapes, plus `trip_id` (primary key) and `updated_at` (cursor) so that incremental runs have
 * something to follow. Same seed, same rows.
 */

/** mulberry32: small, fast and good enough for look-alike data. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Column name and Postgres type, in table order. Mixed-case names are part of the test. */
export const TAXI_COLUMNS: readonly (readonly [string, string])[] = [
  ['trip_id', 'bigint PRIMARY KEY'],
  ['VendorID', 'integer'],
  ['tpep_pickup_datetime', 'timestamp'],
  ['tpep_dropoff_datetime', 'timestamp'],
  ['passenger_count', 'bigint'],
  ['trip_distance', 'double precision'],
  ['RatecodeID', 'bigint'],
  ['store_and_fwd_flag', 'text'],
  ['PULocationID', 'integer'],
  ['DOLocationID', 'integer'],
  ['payment_type', 'bigint'],
  ['fare_amount', 'double precision'],
  ['extra', 'double precision'],
  ['mta_tax', 'double precision'],
  ['tip_amount', 'double precision'],
  ['tolls_amount', 'double precision'],
  ['improvement_surcharge', 'double precision'],
  ['total_amount', 'double precision'],
  ['congestion_surcharge', 'double precision'],
  ['Airport_fee', 'double precision'],
  ['updated_at', 'timestamp(6)'],
];

/** The taxi columns as DuckDB read_csv's `columns` struct, with the DuckDB types tidemark gives them. */
export function taxiDuckdbColumns(): string {
  const types: Record<string, string> = { bigint: 'BIGINT', integer: 'INTEGER', timestamp: 'TIMESTAMP', 'timestamp(6)': 'TIMESTAMP', 'double precision': 'DOUBLE', text: 'VARCHAR' };
  return `{${TAXI_COLUMNS.map(([name, type]) => `'${name}': '${types[type.replace(' PRIMARY KEY', '')]}'`).join(', ')}}`;
}

export function taxiTableDdl(table: string): string {
  return `CREATE TABLE ${table} (${TAXI_COLUMNS.map(([n, t]) => `"${n}" ${t}`).join(', ')})`;
}

const MONTH_START = Date.UTC(2024, 0, 1);
const MONTH_MS = 31 * 86_400_000;
const UPDATED_BASE = Date.UTC(2024, 1, 1);

function stamp(ms: number, micros = 0): string {
  const iso = new Date(ms).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)}${micros ? `.${String(micros).padStart(6, '0')}` : ''}`;
}

const money = (x: number) => (Math.round(x * 100) / 100).toString();
const NULL = '\\N';

/**
 * One trip as a COPY text line (tab-separated, `\N` for NULL, newline-terminated). `updated_at` is `updatedMs` plus
 * one microsecond per id, so the cursor follows the key; ids are dense so a delta can address 1 % of them.
 */
export function taxiCopyLine(id: number, rnd: () => number, updatedMs: number): string {
  const vendor = rnd() < 0.002 ? 6 : rnd() < 0.7 ? 2 : 1;
  const outlier = rnd() < 0.0005;
  const pickup = outlier ? MONTH_START - 86_400_000 * Math.ceil(rnd() * 400) : MONTH_START + Math.floor(rnd() * MONTH_MS / 1000) * 1000;
  const dropoff = pickup + (2 + Math.floor(rnd() * 58)) * 60_000 + Math.floor(rnd() * 60) * 1000;
  const nullish = rnd() < 0.05;
  const distance = rnd() < 0.02 ? 30 + rnd() * 100 : rnd() * rnd() * 30;
  const fare = (rnd() < 0.01 ? -1 : 1) * (3 + distance * 2.5 + rnd() * 5);
  const tip = rnd() < 0.6 ? fare * (0.1 + rnd() * 0.2) : 0;
  const tolls = rnd() < 0.05 ? 6.94 : 0;
  const congestion = rnd() < 0.9 ? 2.5 : 0;
  const airport = rnd() < 0.1 ? 1.75 : 0;
  const total = fare + 1 + 0.5 + tip + tolls + 1 + congestion + airport;
  const fields = [
    String(id),
    String(vendor),
    stamp(pickup),
    stamp(dropoff),
    nullish ? NULL : String(Math.floor(rnd() * 7)),
    money(distance),
    nullish ? NULL : String(rnd() < 0.97 ? 1 : rnd() < 0.5 ? 99 : 2 + Math.floor(rnd() * 5)),
    nullish ? NULL : rnd() < 0.01 ? 'Y' : 'N',
    String(1 + Math.floor(rnd() * 265)),
    String(1 + Math.floor(rnd() * 265)),
    String(Math.floor(rnd() * 5)),
    money(fare),
    '1',
    '0.5',
    money(tip),
    money(tolls),
    '1',
    money(total),
    nullish ? NULL : money(congestion),
    nullish ? NULL : money(airport),
    stamp(updatedMs + Math.floor(id / 1_000_000) * 1000, id % 1_000_000),
  ];
  return `${fields.join('\t')}\n`;
}

/** Chunks of COPY text for trips `[first, first + count)`; `updated_at` grows with the id (one µs apart). */
export function* taxiCopyChunks(first: number, count: number, seed: number, updatedBase = UPDATED_BASE, rowsPerChunk = 5000): Generator<string> {
  const rnd = random(seed + first);
  let chunk = '';
  for (let i = 0; i < count; i += 1) {
    const id = first + i;
    chunk += taxiCopyLine(id, rnd, updatedBase);
    if ((i + 1) % rowsPerChunk === 0) {
      yield chunk;
      chunk = '';
    }
  }
  if (chunk) yield chunk;
}
