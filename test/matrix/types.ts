/** The data the matrix is built from: sources, destinations, writes and faults, and what a cell is. */
import type { Canonical } from './fixture.js';

export type Write = 'append' | 'merge' | 'full';
export const WRITES: readonly Write[] = ['append', 'merge', 'full'];

export const FAILPOINTS = ['lock.after_acquire', 'extract.after_batch', 'load.after_write', 'load.before_commit', 'load.after_commit', 'state.before_store_save'] as const;
/** The failpoints of a ranged load (a chunk of a range staged; a range committed): run by ranged sources only. */
export const RANGE_FAILPOINTS = ['range.after_write', 'range.after_commit'] as const;
export type Failpoint = (typeof FAILPOINTS)[number] | (typeof RANGE_FAILPOINTS)[number];

export type Fault =
  | { readonly kind: 'none' }
  | { readonly kind: 'rerun' }
  | { readonly kind: 'kill'; readonly point: Failpoint }
  | { readonly kind: 'bad' }
  | { readonly kind: 'change' }
  /** `run --full`, then a normal run: the full run must keep the source's position (nothing read again). */
  | { readonly kind: 'full-then-run' }
  /** A ranged load killed after a range committed, the table changed, then resumed (in another snapshot). */
  | { readonly kind: 'kill-change' };

export function faultName(f: Fault): string {
  return f.kind === 'kill' ? `kill@${f.point}` : f.kind;
}

/** Faults only a ranged load can meet. */
export function rangedOnly(f: Fault): boolean {
  return f.kind === 'kill-change' || (f.kind === 'kill' && (RANGE_FAILPOINTS as readonly string[]).includes(f.point));
}

/** Everything a cell's adapters share: its own directory and unique names. */
export interface CellContext {
  /** A fresh directory of this cell; removed afterwards. */
  readonly dir: string;
  /** Unique per cell, usable as a database/schema/bucket-prefix name (lowercase letters, digits, `_`). */
  readonly uid: string;
}

/** How a source ends a bad value deep in its stream. */
export type BadOutcome =
  /** The stream (or partition) fails with an error naming it; `committed` are the rows that must remain. */
  | { readonly kind: 'fail'; readonly message: RegExp }
  /** The row is rejected and accounted for (`rows_rejected`), the run succeeds. */
  | { readonly kind: 'reject'; readonly rows: number };

/** How the oracle checks the position a source's state reached. */
export type WatermarkRule =
  /** `(cursor, id)` of the newest row read: the engine's tuple watermark. */
  | 'tuple'
  /** A keyless stream: the cursor of the newest row loaded (its key part is empty). */
  | 'cursor'
  /** Partitioned streams: one ledger row per partition, with its row count. */
  | 'ledger'
  /** No position (full refresh). */
  | 'none';

export interface SourceInstance {
  /** The `source:` and `streams:` part of the pipeline YAML for this write. */
  yaml(write: Write): string;
  /** The rows the destination must hold now (for append: every row version read). */
  expected(write: Write): Canonical[];
  /** Applies the change: updates rows already read, inserts joining the newest cursor group (and a late commit where the source has transactions). */
  change(): Promise<void>;
  /** Puts a bad value/line deep in the stream (past the first chunk/page/checkpoint). */
  breakDeep(): Promise<BadOutcome>;
  /** Repairs it, so the next run can load everything. */
  repair(): Promise<void>;
  /** Rows that must be in the destination after the failing run of a `bad` cell. */
  expectedAfterBad(write: Write): Canonical[];
  /** Adds rows that a later run must load (used when a failpoint did not fire on the first run). */
  grow(): Promise<void>;
  readonly watermark: (write: Write) => WatermarkRule;
  /** Partitions and their row counts, for the ledger rule. */
  partitions?(): Map<string, number>;
  /**
   * A table read as ranges: a full read is split into at least `min` ranges (the ledger's `<load>:<range>` rows),
   * each of more than `rowsOver` rows (so several chunks) where given.
   */
  readonly ranges?: { readonly min: number; readonly rowsOver?: number };
  /**
   * Versions the destination can no longer get: rows updated after a kill whose old version was in a range the
   * killed load had not committed (`held`: the destination's rows at the kill). The resume reads a new snapshot,
   * where only the new version exists (docs/ranges.md, Resume); append keeps every version it read, so the old one
   * is not expected.
   */
  forgetUnread?(held: readonly Canonical[]): void;
  /** Environment the CLI needs (credentials). */
  readonly env?: Record<string, string>;
  cleanup(): Promise<void>;
}

export interface SourceAdapter {
  readonly name: string;
  /** Its table is read as ranges (`parallel:`): the range failpoints and `kill-change` apply. */
  readonly ranged?: boolean;
  /** undefined: valid; `skip`: the combination makes no sense (with the reason); `refuse`: tidemark refuses it by design and must say so. */
  validate(cell: CellSpec): Verdict;
  setup(ctx: CellContext): Promise<SourceInstance>;
}

export interface DestinationInstance {
  /** The `destination:` part of the pipeline YAML. */
  readonly yaml: string;
  /** Every row of the stream's table, canonical (only the fixture's columns). */
  rows(pipeline: string, table: string): Promise<Canonical[]>;
  /** The destination's own invariants (lake: every object named by the committed manifest once, no orphans). */
  check(pipeline: string, table: string, afterNextRun: boolean): Promise<void>;
  /** Called before every run (the lake notes what the committed manifest names: a replaced generation stays one run). */
  beforeRun?(pipeline: string): Promise<void>;
  readonly env?: Record<string, string>;
  cleanup(): Promise<void>;
}

export interface DestinationAdapter {
  readonly name: string;
  validate(cell: CellSpec): Verdict;
  setup(ctx: CellContext): Promise<DestinationInstance>;
}

export type Verdict = undefined | { readonly skip: string } | { readonly refuse: RegExp; readonly why: string };

export interface CellSpec {
  readonly source: string;
  readonly destination: string;
  readonly write: Write;
  readonly fault: Fault;
}

export function cellId(c: CellSpec): string {
  return `${c.source} → ${c.destination} · ${c.write} · ${faultName(c.fault)}`;
}
