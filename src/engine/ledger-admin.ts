/**
 * `tidemark ledger …`: inspect and edit the partition ledger of a pipeline's partitioned streams. Reloads run as a
 * normal run (lease, one commit per partition); forget edits the ledger under the lease; verify only reads.
 */
import { UsageError } from '../core/errors.js';
import type { VerifyAccess } from '../core/connector.js';
import type { LedgerEntry, PartitionChecksum, PartitionFailure, RunResult } from '../core/types.js';
import { digestOf, partitionDigestSql } from '../shared/verify-sql.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { leaseProviderFor, openDestination, openSource, type OpenDestinationOptions } from '../registry/index.js';
import { ledgerOf, planPartitions } from './partition-load.js';
import { mayReadAsRanges } from './range-default.js';
import { run, type RunOptions } from './run.js';

/** One partition as `ledger verify` sees it: the ledger's row count against the rows in the table. */
export interface LedgerCheck {
  readonly stream: string;
  readonly partition: string;
  /** Null when the table has rows of this partition but the ledger has no row for it. */
  readonly ledgerRows: number | null;
  /** The partition's rows now (where its load kept a checksum, as counted with it: in the lake, in its objects). */
  readonly tableRows: number;
  /**
   * The partition's rows against the checksum its load stored: `equal`, or `changed` (edited, added or deleted since
   * the load). Absent when its load stored none (loaded before checksums were kept).
   */
  readonly checksum?: 'equal' | 'changed';
  readonly ok: boolean;
}

/**
 * What a partition's status says, in the words `ledger list`, `plan` and the dashboard use: `loaded` (its files as
 * loaded), `changed` (its files changed since the load), `failed` (its last load failed; an earlier good load, if
 * any, is still there), `source missing` (loaded, but no file of it is listed any more; with `deleted`, on_missing
 * delete removed its rows), `not loaded yet` (listed in the source, never loaded).
 */
export type PartitionState = 'loaded' | 'changed' | 'failed' | 'source missing' | 'not loaded yet';

/** A partition as the dashboard's grid shows it. */
export interface LedgerGridEntry {
  readonly stream: string;
  readonly partition: string;
  readonly status: PartitionState;
  /** The ledger row: the last good load (or, with status `deleted`, the commit that deleted the rows). */
  readonly entry?: LedgerEntry;
  readonly change?: string;
  readonly failure?: PartitionFailure;
}

/**
 * A row of `tidemark ledger list`: a partition the ledger holds (loaded, deleted, or whose load failed), with the
 * ledger row's fields when there is one (`runId` and `loadedAt` null when it never loaded).
 */
export interface LedgerListEntry extends Omit<LedgerEntry, 'status' | 'runId' | 'loadedAt'> {
  readonly status: PartitionState;
  readonly runId: string | null;
  readonly loadedAt: string | null;
  /** Its rows were deleted (`on_missing: delete`) by the commit of `runId` at `loadedAt`. */
  readonly deleted?: true;
  readonly change?: string;
  readonly failure?: PartitionFailure;
}

function listEntry(g: LedgerGridEntry): LedgerListEntry {
  const e = g.entry;
  return {
    pipeline: e?.pipeline ?? g.failure!.pipeline,
    stream: g.stream,
    partition: g.partition,
    status: g.status,
    files: e?.files ?? [],
    rows: e?.rows ?? 0,
    bytes: e?.bytes ?? 0,
    runId: e?.runId ?? null,
    loadedAt: e?.loadedAt ?? null,
    ...(e?.status === 'deleted' ? { deleted: true as const } : {}),
    ...(g.change !== undefined ? { change: g.change } : {}),
    ...(g.failure !== undefined ? { failure: g.failure } : {}),
  };
}

export function ledgerCommands(pipeline: PipelineConfig, options: OpenDestinationOptions = {}) {
  const partitioned = pipeline.streams.filter((s) => s.strategy === 'partitioned');

  // Streams read as ranges keep a ledger row per committed range: shown by `list`, not reloaded by partition.
  const ranged = pipeline.streams.filter((s) => s.strategy !== 'partitioned' && mayReadAsRanges(s));

  function streamsFor(stream: string | undefined, action: string, withRanges = false): StreamConfig[] {
    const ledgered = withRanges ? [...partitioned, ...ranged] : partitioned;
    if (ledgered.length === 0) throw new UsageError(`pipeline ${pipeline.name} has no partitioned streams, so it has no ledger`);
    if (stream === undefined) return ledgered;
    const found = ledgered.find((s) => s.name === stream);
    if (!found) throw new UsageError(`pipeline ${pipeline.name} has no partitioned stream ${stream} (partitioned streams: ${partitioned.map((s) => s.name).join(', ')}); ${action}`);
    return [found];
  }

  function oneStream(stream: string | undefined, action: string): StreamConfig {
    const streams = streamsFor(stream, action);
    if (streams.length > 1) throw new UsageError(`pipeline ${pipeline.name} has several partitioned streams (${streams.map((s) => s.name).join(', ')}); name one with --stream to ${action}`);
    return streams[0]!;
  }

  async function withLedger<T>(fn: (ledger: ReturnType<typeof ledgerOf>) => Promise<T>): Promise<T> {
    const destination = await openDestination(pipeline.destination, options);
    try {
      return await fn(ledgerOf(destination, pipeline.name, partitioned[0]?.name ?? ''));
    } finally {
      await destination.close();
    }
  }

  /**
   * Ledger rows and failures against the source's listing (metadata only, like a run's planning): what is loaded,
   * what changed since, what failed, what is gone from the source, what was never loaded.
   */
  async function grid(stream?: string): Promise<LedgerGridEntry[]> {
    const streams = streamsFor(stream, 'show', true);
    const destination = await openDestination(pipeline.destination, options);
    try {
      const source = await openSource(pipeline.source);
      try {
        const out: LedgerGridEntry[] = [];
        for (const s of streams) {
          if (s.strategy !== 'partitioned') {
            for (const entry of await ledgerOf(destination, pipeline.name, s.name).list(pipeline.name, s.name)) out.push({ stream: s.name, partition: entry.partition, status: 'loaded', entry });
            continue;
          }
          const plans = await planPartitions({ source, destination, pipeline: pipeline.name }, s);
          const failures = new Map((await ledgerOf(destination, pipeline.name, s.name).failures(pipeline.name, s.name)).map((f) => [f.partition, f]));
          for (const p of plans) {
            const failure = failures.get(p.partition);
            failures.delete(p.partition);
            const entry = p.entry?.status === 'deleted' && p.status !== 'missing' ? undefined : p.entry;
            const status: PartitionState =
              failure !== undefined ? 'failed' : p.status === 'missing' ? 'source missing' : p.status === 'new' ? 'not loaded yet' : p.status === 'changed' ? 'changed' : 'loaded';
            out.push({ stream: s.name, partition: p.partition, status, ...(entry ? { entry } : {}), ...(p.change ? { change: p.change } : {}), ...(failure ? { failure } : {}) });
          }
          // Failed partitions whose files are gone too (never loaded, so no ledger row).
          for (const failure of failures.values()) out.push({ stream: s.name, partition: failure.partition, status: 'failed', failure });
        }
        return out.sort((a, b) => (a.stream === b.stream ? (a.partition < b.partition ? -1 : 1) : a.stream < b.stream ? -1 : 1));
      } finally {
        await source.close();
      }
    } finally {
      await destination.close();
    }
  }

  return {
    /** The partitions the ledger holds, with their status against the source's listing (as `grid`). */
    async list(stream?: string): Promise<readonly LedgerListEntry[]> {
      const rows = await grid(stream);
      return rows.filter((g) => g.entry !== undefined || g.failure !== undefined).map(listEntry);
    },

    /** Loads partitions again with delete-then-insert, each in one commit, whatever the ledger says. */
    reload(partitions: readonly string[], stream?: string, options: Pick<RunOptions, 'logger' | 'onProgress'> = {}): Promise<RunResult> {
      if (partitions.length === 0) throw new UsageError('usage: tidemark ledger reload <partition…> --config <pipeline.yaml>');
      const target = oneStream(stream, 'reload');
      return run(pipeline, { ...options, streams: [target.name], reload: partitions, partitions });
    },

    /** Removes ledger rows; the partitions' rows stay until the next run loads them again (replacing them). */
    async forget(partitions: readonly string[], stream?: string): Promise<number> {
      if (partitions.length === 0) throw new UsageError('usage: tidemark ledger forget <partition…> --config <pipeline.yaml>');
      const target = oneStream(stream, 'forget');
      const lease = await leaseProviderFor(pipeline.destination, pipeline.state).acquire(pipeline.name, { ttlMs: pipeline.lockTtlMs });
      try {
        const removed = await withLedger((ledger) => ledger.forget(pipeline.name, target.name, partitions));
        if (removed === 0) throw new UsageError(`stream ${target.name} has no ledger row for ${partitions.join(', ')}`);
        return removed;
      } finally {
        await lease.release();
      }
    },

    grid,

    /** Compares each partition's ledger row count with the rows in the destination that carry its partition value. */
    async verify(stream?: string): Promise<LedgerCheck[]> {
      const streams = streamsFor(stream, 'verify');
      const destination = await openDestination(pipeline.destination, options);
      try {
        const ledger = ledgerOf(destination, pipeline.name, partitioned[0]?.name ?? '');
        const checks: LedgerCheck[] = [];
        for (const s of streams) {
          const entries = await ledger.list(pipeline.name, s.name);
          const counts = await ledger.countRows(s.name, s.files!.partitionColumn);
          const stored = (await ledger.checksums?.(pipeline.name, s.name)) ?? new Map<string, PartitionChecksum>();
          const access = stored.size > 0 ? await destination.verifyAccess?.() : undefined;
          for (const e of entries) {
            const kept = stored.get(e.partition);
            const now = kept === undefined || access === undefined ? undefined : await partitionChecksum(access, s.name, s.files!.partitionColumn, kept);
            // The lake's counts come from its manifest; the checksum's count is of the rows its objects hold.
            const tableRows = now?.rows ?? counts.get(e.partition) ?? 0;
            const checksum = now?.checksum;
            const ok = tableRows === e.rows && checksum !== 'changed';
            checks.push({ stream: s.name, partition: e.partition, ledgerRows: e.rows, tableRows, ...(checksum !== undefined ? { checksum } : {}), ok });
          }
          for (const [partition, tableRows] of counts) {
            if (!entries.some((e) => e.partition === partition)) checks.push({ stream: s.name, partition, ledgerRows: null, tableRows, ok: false });
          }
        }
        return checks.sort((a, b) => (a.stream === b.stream ? (a.partition < b.partition ? -1 : 1) : a.stream < b.stream ? -1 : 1));
      } finally {
        await destination.close();
      }
    },
  };
}

/**
 * The partition's rows now, checksummed as its load did (over the columns it stored), against that checksum; with
 * their count. A destination that keeps partitions apart (the lake) gives their own relation.
 */
async function partitionChecksum(access: VerifyAccess, table: string, column: string, kept: PartitionChecksum): Promise<{ rows: number; checksum: 'equal' | 'changed' }> {
  const relation = (await access.partitionRelation?.(table, column, kept.partition, kept.columns.map((c) => c.name))) ?? access.relation(table);
  const [row] = await access.query(partitionDigestSql(access.engine, relation, kept.columns, column), [kept.partition]);
  const now = digestOf(row!);
  return { rows: now.rows, checksum: now.rows === kept.rows && now.checksum === kept.checksum ? 'equal' : 'changed' };
}
