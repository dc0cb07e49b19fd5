/**
 * The dashboard's view of the partition ledger, behind a small seam. For pipelines with partitioned streams it goes
 * through the same library calls as `tidemark ledger …` (grid status against the source listing, verify, reload,
 * forget); for any other destination that holds `_tidemark_ledger` rows it shows them as stored.
 */
import { ledgerCommands, openDestination, type PipelineConfig } from '../index.js';

type DestinationConfig = PipelineConfig['destination'];

/** The statuses the grid colours, in the legend's order (see `PartitionState`); any other stored status is shown as it is. */
export const PARTITION_STATUSES = ['loaded', 'changed', 'not loaded yet', 'failed', 'source missing'] as const;
export type PartitionStatus = (typeof PARTITION_STATUSES)[number];

export interface LedgerPartition {
  readonly stream: string;
  readonly partition: string;
  /** One of `PARTITION_STATUSES`, or a status as stored (a destination read without its pipeline's source). */
  readonly status: string;
  readonly rows: number | null;
  readonly bytes: number | null;
  /** The ledger's `files` JSON, parsed when it parses. */
  readonly files: unknown;
  readonly runId: string | null;
  readonly loadedAt: string | null;
  /** `on_missing: delete` removed its rows (at `loadedAt`, by `runId`). */
  readonly deleted?: true;
  /** What changed since the load, or why the source misses it. */
  readonly change?: string;
  /** Its last load failed. */
  readonly failure?: { readonly error: string; readonly failedAt: string; readonly runId: string };
}

export interface LedgerVerifyReport {
  readonly ok: boolean;
  readonly checkedAt: string;
  readonly mismatches: readonly { readonly stream: string; readonly partition: string; readonly ledgerRows: number; readonly destinationRows: number }[];
}

export interface LedgerReadOptions {
  /** Give up after this long when another process holds the destination file. */
  readonly openTimeoutMs: number;
}

export interface LedgerView {
  /** Every partition of every stream of the pipeline; an empty list when the destination has no ledger. */
  partitions(pipeline: PipelineConfig, options: LedgerReadOptions): Promise<readonly LedgerPartition[]>;
  /** `tidemark ledger verify`. */
  verify?(pipeline: PipelineConfig, options: LedgerReadOptions): Promise<LedgerVerifyReport>;
  /** `tidemark ledger reload <partition>`: delete-then-insert in one commit, under the pipeline's lease. */
  reload?(pipeline: PipelineConfig, stream: string, partition: string): Promise<void>;
  /** `tidemark ledger forget <partition>`: the next run loads it again. */
  forget?(pipeline: PipelineConfig, stream: string, partition: string): Promise<void>;
}

/** The part of a SQL destination this reader uses (DuckDB and SQLite destinations both have it). */
interface Queryable {
  query(sql: string, params?: readonly (string | number | null)[]): Promise<Record<string, unknown>[]>;
}

function isQueryable(value: unknown): value is Queryable {
  return typeof (value as Partial<Queryable> | null)?.query === 'function';
}

function ledgerTable(config: DestinationConfig): string {
  const schema = 'schema' in config && config.schema !== undefined ? `"${config.schema.replace(/"/g, '""')}".` : '';
  return `${schema}"_tidemark_ledger"`;
}

function numberOrNull(v: unknown): number | null {
  if (v === null || v === undefined) return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

function parseFiles(v: unknown): unknown {
  if (typeof v !== 'string') return v ?? null;
  try {
    return JSON.parse(v) as unknown;
  } catch {
    return v;
  }
}

const hasPartitionedStreams = (pipeline: PipelineConfig) => pipeline.streams.some((s) => s.strategy === 'partitioned');

/** The ledger through the library: what `tidemark ledger list|verify|reload|forget` do. */
export function libraryLedgerView(): LedgerView {
  const table = tableLedgerView();
  return {
    async partitions(pipeline, options) {
      if (!hasPartitionedStreams(pipeline)) return table.partitions(pipeline, options);
      const grid = await ledgerCommands(pipeline, { openTimeoutMs: options.openTimeoutMs }).grid();
      return grid.map((g) => ({
        stream: g.stream,
        partition: g.partition,
        status: g.status,
        rows: g.entry?.rows ?? null,
        bytes: g.entry?.bytes ?? null,
        files: g.entry?.files ?? null,
        runId: g.entry?.runId ?? null,
        loadedAt: g.entry?.loadedAt ?? null,
        ...(g.entry?.status === 'deleted' ? { deleted: true as const } : {}),
        ...(g.change !== undefined ? { change: g.change } : {}),
        ...(g.failure !== undefined ? { failure: { error: g.failure.error, failedAt: g.failure.failedAt, runId: g.failure.runId } } : {}),
      }));
    },
    async verify(pipeline, options) {
      if (!hasPartitionedStreams(pipeline)) return { ok: true, checkedAt: new Date().toISOString(), mismatches: [] };
      const checks = await ledgerCommands(pipeline, { openTimeoutMs: options.openTimeoutMs }).verify();
      const mismatches = checks
        .filter((c) => !c.ok)
        .map((c) => ({ stream: c.stream, partition: c.partition, ledgerRows: c.ledgerRows ?? 0, destinationRows: c.tableRows }));
      return { ok: mismatches.length === 0, checkedAt: new Date().toISOString(), mismatches };
    },
    async reload(pipeline, stream, partition) {
      const result = await ledgerCommands(pipeline).reload([partition], stream);
      const failed = result.streams.find((s) => s.outcome === 'failed');
      if (failed) throw new Error(`reload of ${partition} failed: ${failed.error ?? 'unknown error'}`);
    },
    async forget(pipeline, stream, partition) {
      await ledgerCommands(pipeline).forget([partition], stream);
    },
  };
}

/** Reads the ledger table straight from the destination, as stored. */
export function tableLedgerView(): LedgerView {
  return {
    async partitions(pipeline, options) {
      const destination = await openDestination(pipeline.destination, { openTimeoutMs: options.openTimeoutMs });
      try {
        if (!isQueryable(destination)) return [];
        let rows: Record<string, unknown>[];
        try {
          rows = await destination.query(
            `SELECT stream, "partition", files, "rows", bytes, status, run_id, loaded_at FROM ${ledgerTable(pipeline.destination)} WHERE pipeline = ? ORDER BY stream, "partition"`,
            [pipeline.name],
          );
        } catch (error) {
          // A destination tidemark never wrote to has no ledger table; that is an empty ledger, not an error.
          if (/does not exist|no such table/i.test((error as Error).message)) return [];
          throw error;
        }
        return rows.map((r) => ({
          stream: String(r.stream),
          partition: String(r.partition),
          status: String(r.status),
          rows: numberOrNull(r.rows),
          bytes: numberOrNull(r.bytes),
          files: parseFiles(r.files),
          runId: r.run_id === null || r.run_id === undefined ? null : String(r.run_id),
          loadedAt: r.loaded_at === null || r.loaded_at === undefined ? null : String(r.loaded_at),
        }));
      } finally {
        await destination.close();
      }
    },
  };
}
