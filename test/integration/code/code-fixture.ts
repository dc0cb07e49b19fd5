/** Shared setup of the code-source tests: a destination of each kind, and an in-memory "API" of orders. */
import { join } from 'node:path';
import { definePipeline, readTable, type DefinePipelineOptions, type PipelineInput, type TableRow } from '../../../src/index.js';
import { createTestDatabase } from '../../conformance/postgres-fixture.js';
import { tempDir } from '../../helpers/fs.js';

export type DestinationKind = 'duckdb' | 'sqlite' | 'postgres';
export const DESTINATIONS: readonly DestinationKind[] = ['duckdb', 'sqlite', 'postgres'];

export interface Workspace {
  readonly dir: string;
  readonly destination: PipelineInput['destination'];
  pipeline(input: Omit<PipelineInput, 'destination'>, options?: DefinePipelineOptions): ReturnType<typeof definePipeline>;
  rows(table: string, orderBy?: readonly string[]): Promise<TableRow[]>;
  cleanup(): Promise<void>;
}

export async function workspace(kind: DestinationKind): Promise<Workspace> {
  const tmp = await tempDir(`tidemark-code-${kind}-`);
  const db = kind === 'postgres' ? await createTestDatabase('tm_code') : undefined;
  const destination: PipelineInput['destination'] =
    kind === 'postgres' ? { type: 'postgres', url: db!.url } : kind === 'duckdb' ? { type: 'duckdb', path: join(tmp.dir, 'w.duckdb') } : { type: 'sqlite', path: join(tmp.dir, 'w.sqlite') };
  const ws: Workspace = {
    dir: tmp.dir,
    destination,
    pipeline: (input, options) => definePipeline({ ...input, destination } as PipelineInput, options),
    async rows(table, orderBy = ['id']) {
      // Any pipeline into this destination reads it: readTable needs only its resolved destination.
      const reader = ws.pipeline({ name: 'reader', source: { type: 'sqlite', path: 'unused' }, streams: [{ table: 'unused' }] });
      const out: TableRow[] = [];
      for await (const row of readTable(reader, table, { orderBy })) out.push(row);
      return out;
    },
    async cleanup() {
      await db?.drop();
      await tmp.cleanup();
    },
  };
  return ws;
}

export interface Order {
  readonly id: bigint;
  readonly updated_at: string;
  readonly amount: string;
}

/** Orders 1…n; every three ids share one timestamp (ties across pages and checkpoints), with microseconds. */
export function orders(n: number, from = 1, base = Date.UTC(2024, 0, 1)): Order[] {
  return Array.from({ length: n }, (_, i) => {
    const id = from + i;
    const micros = BigInt(base + Math.floor(id / 3) * 1000) * 1000n + 123456n;
    return { id: BigInt(id), updated_at: microsIso(micros), amount: `${id}.${String(id % 100).padStart(2, '0')}` };
  });
}

export function microsIso(micros: bigint): string {
  const ms = Number(micros / 1000n);
  return `${new Date(ms).toISOString().slice(0, 19)}.${String(micros % 1_000_000n).padStart(6, '0')}Z`;
}

export function byCursor(a: Order, b: Order): number {
  return a.updated_at < b.updated_at ? -1 : a.updated_at > b.updated_at ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** Pages of `size` records. */
export function pages<T>(records: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < records.length; i += size) out.push(records.slice(i, i + size));
  return out;
}
