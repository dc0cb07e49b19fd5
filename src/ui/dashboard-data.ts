/**
 * What the dashboard knows about each pipeline, read through the library while runs may be going on.
 *
 * Reads open the state store briefly (a short open timeout), read, and close, so a run that starts meanwhile waits
 * at most one short read. When the destination file is busy (a run holds it) the last data read is served, marked
 * stale with the reason. Within this process every open of one destination goes through `DestinationGate`:
 * DuckDB lets one process open the same file twice, and two instances writing one file would corrupt it.
 */
import { readdir, stat } from 'node:fs/promises';
import { extname, join, relative, resolve } from 'node:path';
import {
  ConflictError,
  errorMessage,
  loadPipeline,
  openSource,
  openStateStore,
  type PipelineConfig,
  type PipelineState,
  type PipelineStateVersion,
  type RunRecord,
  type TypedValue,
  type Watermark,
} from '../index.js';
import { retainedLogWarning } from '../core/change-log.js';
import type { LedgerPartition, LedgerView } from './ledger-view.js';
import { readLockHolder, type LockHolder } from './lock-holder.js';
import { readLiveProgress, type LiveProgress } from '../engine/run-journal.js';
import { Cron } from 'croner';

export interface RejectRecord {
  readonly runId: string;
  readonly stream: string;
  readonly column: string | null;
  readonly reason: string;
  readonly row: string;
}

/** One consistent read of a pipeline's state tables. */
export interface PipelineSnapshot {
  readonly state: PipelineState;
  /** Newest first, at most `HISTORY_LIMIT` versions. */
  readonly history: readonly PipelineStateVersion[];
  /** Newest first. */
  readonly runs: readonly RunRecord[];
  readonly rejects: readonly RejectRecord[];
  readonly ledger: readonly LedgerPartition[];
  readonly readAt: string;
}

export interface Staleness {
  readonly reason: string;
  /** When the data shown was read (null: never read). */
  readonly dataFrom: string | null;
}

export interface PipelineView {
  readonly name: string;
  readonly file: string;
  readonly config: PipelineConfig | null;
  readonly snapshot: PipelineSnapshot | null;
  /** Set when the data shown is not current. */
  readonly stale: Staleness | null;
  readonly lock: LockHolder | null;
  /** A config or read error (a busy file is `stale`, not an error). */
  readonly error: string | null;
  /** Problems the pipeline's source reports, one line each: a replication slot over `max_retained_wal`. */
  readonly warnings: readonly string[];
  /** A run of this pipeline going on now on this machine: its figures per stream (see src/engine/run-journal.ts). */
  readonly live: LiveProgress | null;
}

export const RUNS_PER_STREAM = 100;
const HISTORY_LIMIT = 200;
const REJECTS_LIMIT = 200;

/** Pipeline files: each directory contributes its `*.yaml` / `*.yml` files (sorted), files are taken as given. */
export async function pipelineFiles(inputs: readonly string[]): Promise<string[]> {
  const files: string[] = [];
  for (const input of inputs) {
    const path = resolve(input);
    const info = await stat(path).catch(() => undefined);
    if (info?.isDirectory()) {
      const names = (await readdir(path)).filter((f) => ['.yaml', '.yml'].includes(extname(f).toLowerCase())).sort();
      files.push(...names.map((f) => join(path, f)));
    } else {
      files.push(path);
    }
  }
  return [...new Set(files)];
}

type Holder = { readonly kind: 'read' | 'action'; readonly what: string; readonly done: Promise<unknown> };

/** One holder per destination at a time within this process; reads wait for reads, never for actions. */
export class DestinationGate {
  private readonly holders = new Map<string, Holder>();

  holderOf(key: string): Holder | undefined {
    return this.holders.get(key);
  }

  /** Runs `fn` unless an action holds the destination; returns `{ busy }` with what holds it otherwise. */
  async tryRead<T>(key: string, fn: () => Promise<T>): Promise<{ value: T } | { busy: string }> {
    for (;;) {
      const holder = this.holders.get(key);
      if (!holder) break;
      if (holder.kind === 'action') return { busy: holder.what };
      await holder.done.catch(() => undefined);
    }
    return { value: await this.hold(key, 'read', 'read', fn) };
  }

  /** Runs an action once the destination is free of reads; refuses while another action holds it. */
  async act<T>(key: string, what: string, fn: () => Promise<T>): Promise<T> {
    for (;;) {
      const holder = this.holders.get(key);
      if (!holder) break;
      if (holder.kind === 'action') throw new ConflictError(`${holder.what} is in progress; try again when it finishes`);
      await holder.done.catch(() => undefined);
    }
    return this.hold(key, 'action', what, fn);
  }

  private async hold<T>(key: string, kind: Holder['kind'], what: string, fn: () => Promise<T>): Promise<T> {
    const done = fn();
    const holder: Holder = { kind, what, done };
    this.holders.set(key, holder);
    try {
      return await done;
    } finally {
      if (this.holders.get(key) === holder) this.holders.delete(key);
    }
  }
}

export function destinationKey(config: PipelineConfig): string {
  const d = config.destination;
  return 'path' in d ? `${d.type}:${resolve(d.path)}` : `${d.type}:${config.name}`;
}

export interface DashboardReaderOptions {
  readonly inputs: readonly string[];
  readonly ledger: LedgerView;
  readonly openTimeoutMs: number;
  /** Reads younger than this are served from memory, so one page load opens the destination once. */
  readonly maxAgeMs: number;
  readonly gate: DestinationGate;
}

interface Cached {
  readonly snapshot: PipelineSnapshot;
  readonly at: number;
}

export class DashboardReader {
  private readonly cache = new Map<string, Cached>();
  private readonly slotCache = new Map<string, { readonly warnings: readonly string[]; readonly at: number }>();

  constructor(private readonly options: DashboardReaderOptions) {}

  /** Every pipeline, in file order; configs are reloaded on each call so edited files show at once. */
  async all(): Promise<PipelineView[]> {
    const files = await pipelineFiles(this.options.inputs);
    const seen = new Set<string>();
    const views: PipelineView[] = [];
    for (const file of files) {
      const rel = relative(process.cwd(), file);
      const shown = rel && !rel.startsWith('..') ? rel : file;
      let config: PipelineConfig;
      try {
        config = await loadPipeline(file);
      } catch (error) {
        views.push({ name: shown, file: shown, config: null, snapshot: null, stale: null, lock: null, error: errorMessage(error), warnings: [], live: null });
        continue;
      }
      if (seen.has(config.name)) {
        views.push({ name: `${config.name} (${shown})`, file: shown, config: null, snapshot: null, stale: null, lock: null, error: `pipeline name ${config.name} is used by an earlier file too`, warnings: [], live: null });
        continue;
      }
      seen.add(config.name);
      views.push(await this.view(config, shown));
    }
    return views;
  }

  async one(name: string): Promise<PipelineView | undefined> {
    return (await this.all()).find((v) => v.config?.name === name);
  }

  /** Forget cached reads, so the next page load shows what an action just did. */
  invalidate(name: string): void {
    this.cache.delete(name);
    this.slotCache.delete(name);
  }

  private async view(config: PipelineConfig, file: string): Promise<PipelineView> {
    const lock = await readLockHolder(config);
    const cached = this.cache.get(config.name);
    const base = { name: config.name, file, config, lock, warnings: await this.sourceWarnings(config), live: readLiveProgress(config.name) };
    if (cached && Date.now() - cached.at < this.options.maxAgeMs) return { ...base, snapshot: cached.snapshot, stale: null, error: null };
    const stale = (reason: string): PipelineView => ({
      ...base,
      snapshot: cached?.snapshot ?? null,
      stale: { reason, dataFrom: cached?.snapshot.readAt ?? null },
      error: null,
    });
    // A live lease on a file destination means a run has (or is about to have) the file open: do not even try.
    if (lock?.live && 'path' in config.destination) {
      return stale(`pipeline is running (lease ${lock.token}, pid ${lock.pid} on ${lock.host}, since ${lock.acquiredAt})`);
    }
    try {
      const result = await this.options.gate.tryRead(destinationKey(config), () => this.read(config));
      if ('busy' in result) return stale(`${result.busy} is in progress from this dashboard`);
      this.cache.set(config.name, { snapshot: result.value, at: Date.now() });
      return { ...base, snapshot: result.value, stale: null, error: null };
    } catch (error) {
      if (error instanceof ConflictError) return stale('the destination file is in use by another process');
      return { ...base, snapshot: cached?.snapshot ?? null, stale: cached ? { reason: 'the last read failed', dataFrom: cached.snapshot.readAt } : null, error: errorMessage(error) };
    }
  }

  /**
   * What a run would warn about its source's change log: the pipeline's replication slot retaining more WAL than
   * `max_retained_wal` (the slot lives in the source, so this is asked of the source, never of the destination a run
   * may hold). Cached like the state reads; a source that cannot be reached gives no warning here (runs report it).
   */
  private async sourceWarnings(config: PipelineConfig): Promise<readonly string[]> {
    const streams = config.streams.filter((s) => s.strategy === 'log');
    if (streams.length === 0) return [];
    const cached = this.slotCache.get(config.name);
    if (cached && Date.now() - cached.at < this.options.maxAgeMs) return cached.warnings;
    let warnings: readonly string[] = [];
    try {
      const source = await openSource(config.source);
      try {
        const log = source.changeLog;
        if (log !== undefined) {
          const request = { pipeline: config.name, tables: streams.map((s) => ({ stream: s.name, table: s.table!, primaryKey: s.primaryKey })) };
          const status = await log.status(request);
          const max = Math.min(...streams.map((s) => s.log?.maxRetainedBytes ?? Number.POSITIVE_INFINITY));
          if (status.retainedBytes !== undefined && status.retainedBytes > max) {
            warnings = [retainedLogWarning(status.slot ?? config.name, status.retainedBytes, max)];
          }
        }
      } finally {
        await source.close();
      }
    } catch {
      warnings = [];
    }
    this.slotCache.set(config.name, { warnings, at: Date.now() });
    return warnings;
  }

  private async read(config: PipelineConfig): Promise<PipelineSnapshot> {
    const opened = await openStateStore(config, { openTimeoutMs: this.options.openTimeoutMs });
    let snapshot: Omit<PipelineSnapshot, 'ledger'>;
    try {
      const { store } = opened;
      const state = (await store.load(config.name)) ?? { pipeline: config.name, version: 0, streams: {} };
      const history = (await store.history(config.name)).slice(0, HISTORY_LIMIT);
      const runs = await store.runs(config.name, RUNS_PER_STREAM * Math.max(1, config.streams.length));
      const rejects = await store.rejects(config.name, REJECTS_LIMIT);
      snapshot = { state, history, runs, rejects, readAt: new Date().toISOString() };
    } finally {
      await opened.close();
    }
    const ledger = await this.options.ledger.partitions(config, { openTimeoutMs: this.options.openTimeoutMs });
    return { ...snapshot, ledger };
  }
}

/** How far the watermark trails now, when its cursor is a point in time (naive timestamps are read as UTC). */
export function lagMs(watermark: Watermark | undefined | null, now = Date.now()): number | null {
  const c: TypedValue | undefined = watermark?.cursor;
  if (!c) return null;
  let iso: string | undefined;
  if (c.type === 'timestamptz') iso = c.value;
  else if (c.type === 'timestamp') iso = `${c.value.replace(' ', 'T')}Z`;
  else if (c.type === 'date') iso = `${c.value}T00:00:00Z`;
  if (iso === undefined) return null;
  // Date keeps milliseconds only; that is plenty for a lag shown in seconds.
  const t = Date.parse(iso.replace(/(\.\d{3})\d+/, '$1'));
  return Number.isNaN(t) ? null : now - t;
}

export function runDurationMs(run: RunRecord): number | null {
  const d = Date.parse(run.finishedAt) - Date.parse(run.startedAt);
  return Number.isNaN(d) ? null : d;
}

/** When `tidemark schedule` next runs a pipeline with a `schedule:`, read in its time zone; null without one. */
export function nextScheduledRun(config: PipelineConfig, now = new Date()): string | null {
  if (config.schedule === undefined) return null;
  const cron = new Cron(config.schedule, { paused: true, ...(config.timezone !== undefined ? { timezone: config.timezone } : {}) });
  return cron.nextRun(now)?.toISOString() ?? null;
}
