/** What a run tells its progress display, per stream, after each batch (and when a read or partition begins). */

/** Where a partitioned stream is: the partition being loaded (1-based) among those pending this run. */
export interface PartitionProgress {
  readonly index: number;
  readonly count: number;
  readonly id: string;
  /** Rows the partition's files declare (Parquet footers), when they do. */
  readonly rows?: number;
  /** Rows read by the stream before this partition began. */
  readonly rowsBefore: number;
}

export interface RangesDone {
  readonly done: number;
  readonly total: number;
}

export interface ProgressDetail {
  /** Rows the read is expected to return in all, where the source can tell (an estimate, e.g. Postgres statistics). */
  readonly rowsTotal?: number;
  readonly partition?: PartitionProgress;
  /** A read loaded as ranges (`parallel:`): ranges committed, of all the load's ranges. */
  readonly ranges?: RangesDone;
  /**
   * When the stream began, as a `monotonicMs()` reading (the clock of run durations): a display counts rates and
   * elapsed time from it, since the first report may come only after a whole chunk has been read.
   */
  readonly startedAt?: number;
}

export type ProgressListener = (stream: string, rowsRead: number, detail?: ProgressDetail) => void;
