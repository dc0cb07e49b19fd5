/**
 * `tidemark ledger …`: inspect and edit the partition ledger of a pipeline's partitioned streams. Reloads run as a
 * normal run (lease, one commit per partition); forget edits the ledger under the lease; verify only reads.
 */
import { UsageError } from '../core/errors.js';
import type { LedgerEntry, RunResult } from '../core/types.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { leaseProviderFor, openDestination, openSource, type OpenDestinationOptions } from '../registry/index.js';
import { ledgerOf, planPartitions } from './partition-load.js';
import { run, type RunOptions } from './run.js';

/** One partition as `ledger verify` sees it: the ledger's row count against the rows in the table. */
export interface LedgerCheck {
  readonly stream: string;
  readonly partition: string;
  /** Null when the table has rows of this partition but the ledger has no row for it. */
  readonly ledgerRows: number | null;
  readonly tableRows: number;
  readonly ok: boolean;
}

/** A partition as the dashboard's grid shows it. */
export interface LedgerGridEntry {
  readonly stream: string;
  readonly partition: string;
  /** `loaded`; `changed` (its files changed since the load); `missing` (listed in the source, never loaded); or as stored. */
  readonly status: string;
  readonly entry?: LedgerEntry;
  readonly change?: string;
}

export function ledgerCommands(pipeline: PipelineConfig, options: OpenDestinationOptions = {}) {
  const partitioned = pipeline.streams.filter((s) => s.strategy === 'partitioned');

  function streamsFor(stream: string | undefined, action: string): StreamConfig[] {
    if (partitioned.length === 0) throw new UsageError(`pipeline ${pipeline.name} has no partitioned streams, so it has no ledger`);
    if (stream === undefined) return partitioned;
    const found = partitioned.find((s) => s.name === stream);
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

  return {
    list(stream?: string): Promise<readonly LedgerEntry[]> {
      const streams = streamsFor(stream, 'list');
      return withLedger((ledger) => ledger.list(pipeline.name, streams.length === 1 ? streams[0]!.name : undefined));
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

    /**
     * Ledger rows against the source's listing (metadata only, like a run's planning): what is loaded, what changed
     * since, what was never loaded. Ledger rows whose files are gone keep their stored status.
     */
    async grid(stream?: string): Promise<LedgerGridEntry[]> {
      const streams = streamsFor(stream, 'show');
      const destination = await openDestination(pipeline.destination, options);
      try {
        const source = await openSource(pipeline.source);
        try {
          const out: LedgerGridEntry[] = [];
          for (const s of streams) {
            const plans = await planPartitions({ source, destination, pipeline: pipeline.name }, s);
            const listed = new Set(plans.map((p) => p.partition));
            for (const p of plans) {
              const status = p.status === 'new' ? 'missing' : p.status === 'changed' ? 'changed' : (p.entry?.status ?? 'loaded');
              out.push({ stream: s.name, partition: p.partition, status, ...(p.entry ? { entry: p.entry } : {}), ...(p.change ? { change: p.change } : {}) });
            }
            for (const e of await ledgerOf(destination, pipeline.name, s.name).list(pipeline.name, s.name)) {
              if (!listed.has(e.partition)) out.push({ stream: s.name, partition: e.partition, status: e.status, entry: e });
            }
          }
          return out.sort((a, b) => (a.stream === b.stream ? (a.partition < b.partition ? -1 : 1) : a.stream < b.stream ? -1 : 1));
        } finally {
          await source.close();
        }
      } finally {
        await destination.close();
      }
    },

    /** Compares each partition's ledger row count with the rows in the destination that carry its partition value. */
    verify(stream?: string): Promise<LedgerCheck[]> {
      const streams = streamsFor(stream, 'verify');
      return withLedger(async (ledger) => {
        const checks: LedgerCheck[] = [];
        for (const s of streams) {
          const entries = await ledger.list(pipeline.name, s.name);
          const counts = await ledger.countRows(s.name, s.files!.partitionColumn);
          for (const e of entries) {
            const tableRows = counts.get(e.partition) ?? 0;
            checks.push({ stream: s.name, partition: e.partition, ledgerRows: e.rows, tableRows, ok: tableRows === e.rows });
          }
          for (const [partition, tableRows] of counts) {
            if (!entries.some((e) => e.partition === partition)) checks.push({ stream: s.name, partition, ledgerRows: null, tableRows, ok: false });
          }
        }
        return checks.sort((a, b) => (a.stream === b.stream ? (a.partition < b.partition ? -1 : 1) : a.stream < b.stream ? -1 : 1));
      });
    },
  };
}
