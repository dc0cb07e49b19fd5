/** A small SQLite source for tests: `items(id, updated_at, value, note)` with controllable ties. */
import Database from 'better-sqlite3';

export interface ItemRow {
  readonly id: number | bigint;
  readonly updated_at: string | null;
  readonly value: string;
}

export function createItems(path: string, rows: readonly ItemRow[]): void {
  const db = new Database(path);
  // WAL, as a live application database would run: readers (tidemark's snapshot) never block its writers.
  db.pragma('journal_mode = WAL');
  db.exec(`CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, updated_at TIMESTAMP, value TEXT NOT NULL)`);
  upsertItems(db, rows);
  db.close();
}

export function upsertItems(dbOrPath: Database.Database | string, rows: readonly ItemRow[]): void {
  const db = typeof dbOrPath === 'string' ? new Database(dbOrPath) : dbOrPath;
  const stmt = db.prepare(`INSERT INTO items (id, updated_at, value) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, value = excluded.value`);
  db.transaction(() => {
    for (const r of rows) stmt.run(r.id, r.updated_at, r.value);
  })();
  if (typeof dbOrPath === 'string') db.close();
}

/** `count` rows; every `tie` consecutive ids share one timestamp. */
export function itemRange(from: number, count: number, tie: number, baseSecond = 0, label = 'v1'): ItemRow[] {
  return Array.from({ length: count }, (_, i) => {
    const id = from + i;
    const second = baseSecond + Math.floor((id - 1) / tie);
    const ts = new Date(Date.UTC(2024, 0, 1) + second * 1000).toISOString().replace('T', ' ').replace('Z', '000');
    return { id, updated_at: ts, value: `${label}-${id}` };
  });
}

export function pipelineYaml(options: {
  name?: string;
  source: string;
  destination: { type: 'duckdb' | 'sqlite'; path: string };
  stream?: Record<string, unknown>;
  extra?: string;
}): string {
  const stream = { table: 'items', primary_key: ['id'], cursor: 'updated_at', ...options.stream };
  const streamYaml = Object.entries(stream)
    .filter(([, v]) => v !== undefined)
    .map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`)
    .join('\n');
  return `name: ${options.name ?? 'items'}
source:
  type: sqlite
  path: ${JSON.stringify(options.source)}
streams:
${streamYaml}
destination:
  type: ${options.destination.type}
  path: ${JSON.stringify(options.destination.path)}
${options.extra ?? ''}`;
}
