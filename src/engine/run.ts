/**
 * The run loop (DESIGN.md §2), top to bottom:
 * lease → open destination and source → load state → for each stream: plan, read, write, commit → release.
 * Every commit carries data and state together; a failure leaves state and data as after the last commit.
 */
import { hostname } from 'node:os';
import { partitionLeaseName, type Destination, type Lease, type LeaseProvider, type Source, type StateStore } from '../core/connector.js';
import { ConfigError, ConflictError, TidemarkError, errorMessage, withContext } from '../core/errors.js';
import { failpoint } from '../core/failpoints.js';
import { newRunId } from '../core/ids.js';
import { elapsedMs, finishedAt, monotonicMs, runStart } from '../core/run-clock.js';
import type { Logger } from '../core/logger.js';
import { silentLogger } from '../core/logger.js';
import type { PipelineState, RunResult, StreamResult } from '../core/types.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { concurrentPartitionWriters, leaseProviderFor, openSource } from '../registry/index.js';
import { aboveFence } from './lease-fence.js';
import { openPipelineDestination } from './state-sync.js';
import { partitionLoader } from './partition-load.js';
import { nothingLoaded, rangeJobLoader, rangeLeaseNames, type RangeJob } from './range-job.js';
import type { ProgressListener } from './progress.js';
import { checkLookbacks, checkStoredColumns } from './plan.js';
import { loadStream } from './stream-load.js';
import { loadLogStreams } from './log-load.js';
import { planReadsTogether, storeSharedResume } from './read-together.js';
import { recordQuietRuns, type QuietRunContext } from './quiet-runs.js';
import { openRunJournal } from './run-journal.js';
import { withoutPosition } from './stateless.js';
import { NO_OBSERVER, allObservers, type RunObserver } from '../core/run-observer.js';
import { notifyObserver } from '../notify/notify.js';
import { runTelemetry } from '../telemetry/telemetry.js';
import { observedDestination } from './observed-destination.js';
import { StateLine, loadSideBySide, loadsAlone, type Lane } from './side-by-side.js';
import { sharedWriter, takesRangeWriters } from './range-writers.js';
import { destinationFileError } from './destination-file-errors.js';

export interface RunOptions {
  /** Build every selected stream anew beside the live tables and swap when complete. */
  readonly full?: boolean;
  /** Only these streams (by name). */
  readonly streams?: readonly string[];
  readonly logger?: Logger;
  readonly onProgress?: ProgressListener;
  /** Partitioned streams: load these partitions again (delete-then-insert), whatever their ledger rows say. */
  readonly reload?: readonly string[];
  /** Aborting stops the run between batches: uncommitted rows are rolled back, the lease released. */
  readonly signal?: AbortSignal;
  /** Who runs this, as run records show it (default `host:pid`); queue workers add their name and job id. */
  readonly worker?: string;
  /** Partitioned streams: load only these of the pending partitions (one queue job per partition). */
  readonly partitions?: readonly string[];
  /** A queue job's share of a ranged build spread over workers (see range-job.ts); one stream only. */
  readonly rangeJob?: RangeJob;
  /** A files stream whose pattern matches no file fails instead of warning. */
  readonly strict?: boolean;
  /**
   * The caller's upper bound of incremental reads (PyCharter's UNTIL), read as each stream's cursor type: rows above
   * it wait for a later run, and the stored watermark never passes it.
   */
  readonly until?: string;
  /** Called once the run holds its leases, before it opens anything (queue workers log "started" here, not before). */
  readonly onLeased?: () => void;
  /** Log streams (`strategy: log`) keep applying changes until `signal` aborts, instead of stopping at the log position read at start. */
  readonly follow?: boolean;
}

export function emptyState(pipeline: string): PipelineState {
  return { pipeline, version: 0, streams: {} };
}

export async function run(pipeline: PipelineConfig, given: RunOptions = {}): Promise<RunResult> {
  const runId = newRunId();
  // The journal (the dashboard's live figures and log lines) hears everything the caller's logger and listener hear.
  const journal = openRunJournal(pipeline.name, runId, given.logger ?? silentLogger, given.onProgress);
  const options: RunOptions = { ...given, logger: journal.logger, onProgress: journal.onProgress };
  const observer = allObservers([(await runTelemetry())?.runStarted(pipeline.name, runId), notifyObserver(pipeline, runId, options.logger)]);
  try {
    const result = await observedRun(pipeline, runId, observer, options);
    observer.runFinished(result);
    journal.finish(result.streams.flatMap((s) => (s.error !== undefined ? [{ stream: s.stream, error: s.error }] : [])));
    return result;
  } catch (error) {
    const failure = destinationFileError(error, pipeline);
    observer.runFinished(undefined, failure);
    journal.finish([{ stream: '', error: errorMessage(failure) }]);
    throw failure;
  }
}

async function observedRun(pipeline: PipelineConfig, runId: string, observer: RunObserver, options: RunOptions): Promise<RunResult> {
  const logger = options.logger ?? silentLogger;
  const startedAt = runStart();
  const streams = selectStreams(pipeline, options.streams);
  // Leases first, before any destination connection or file is opened: a run that has to wait holds nothing.
  const provider = leaseProviderFor(pipeline.destination, pipeline.state);
  const leases = await acquireLeases(provider, pipeline, streams, { ...options, logger });
  try {
    await failpoint('lock.after_acquire');
    options.onLeased?.();
    const ends = await openEnds(pipeline, logger);
    const { source } = ends;
    const destination = observer === NO_OBSERVER ? ends.destination : observedDestination(ends.destination, observer);
    try {
      // A shared lease only carries the current token; the exclusive ones are taken above the destination's fence.
      if (leases.partitions === undefined) {
        leases.pipeline = await aboveFence(provider, leases.pipeline, destination, pipeline.lockTtlMs);
        await cutOffOlderHolders(destination, leases.pipeline, logger);
      } else for (const [name, own] of leases.partitions) leases.partitions.set(name, await aboveFence(provider, own, destination, pipeline.lockTtlMs));
      const results = await runStreams({ pipeline, runId, startedAt, streams, destination, source, lease: leases.pipeline, partitionLeases: leases.partitions, options, logger, observer }).catch(
        async (error: unknown) => {
          await settleRun(destination.state, { pipeline, runId, startedAt, options, logger }, destinationFileError(error, pipeline));
          throw error;
        },
      );
      return { pipeline: pipeline.name, runId, startedAt, finishedAt: finishedAt(startedAt), ok: results.every((r) => r.outcome === 'committed'), streams: results };
    } finally {
      try {
        await source.close();
      } finally {
        await destination.close();
      }
    }
  } finally {
    for (const own of leases.partitions?.values() ?? []) await own.release();
    await leases.pipeline.release();
  }
}

/** Ends the destination sessions a holder frozen past its lease left behind (see Destination.cutOffOlderHolders). */
async function cutOffOlderHolders(destination: Destination, lease: Lease, logger: Logger): Promise<void> {
  if (destination.cutOffOlderHolders === undefined) return;
  try {
    const ended = await destination.cutOffOlderHolders(lease.pipeline, lease.token);
    if (ended.length) {
      logger.log('warn', `pipeline ${lease.pipeline}: ended ${ended.length} destination session(s) of an earlier run whose lease passed: ${ended.join(', ')}`, { pipeline: lease.pipeline });
    }
  } catch (error) {
    // Without the right to end them, this run waits for their locks up to the destination's lock_timeout.
    logger.log('warn', `pipeline ${lease.pipeline}: cannot end the destination sessions of earlier runs: ${errorMessage(error)}`, { pipeline: lease.pipeline });
  }
}

/**
 * Destination and source open side by side: DuckDB creates its instance on a worker thread while the source's
 * driver loads and connects (~40 ms of a no-op run). When one fails, the other is closed again.
 */
async function openEnds(pipeline: PipelineConfig, logger: Logger): Promise<{ destination: Destination; source: Source }> {
  const [destination, source] = await Promise.allSettled([
    openPipelineDestination(pipeline, logger).catch((e: unknown) => {
      throw withContext(e, { pipeline: pipeline.name, phase: 'connect' }, 'destination');
    }),
    openSource(pipeline.source, logger).catch((e: unknown) => {
      throw withContext(e, { pipeline: pipeline.name, phase: 'connect' }, 'source');
    }),
  ]);
  if (destination.status === 'fulfilled' && source.status === 'fulfilled') return { destination: destination.value, source: source.value };
  if (destination.status === 'fulfilled') await destination.value.close().catch(() => undefined);
  if (source.status === 'fulfilled') await source.value.close().catch(() => undefined);
  throw destination.status === 'rejected' ? destination.reason : (source as PromiseRejectedResult).reason;
}

/** The leases a run holds; `aboveFence` may replace them, so the run releases what is here when it ends. */
interface RunLeases {
  /** The pipeline lease: exclusive, or shared when this run is a partition job. */
  pipeline: Lease;
  /** A partition job's own leases by lease name (`partitionLeaseName`); absent for an exclusive run. */
  readonly partitions?: Map<string, Lease>;
}

/**
 * A run limited to partitions of partitioned streams, into a destination that takes concurrent writers, is a
 * partition job: it holds the pipeline lease shared (so it never runs beside a whole-pipeline run or an admin
 * command, which hold it exclusively) and one exclusive lease per partition (so no partition loads twice at once),
 * and its commits are fenced by the partition's token. A range job (ranges of a build planned beforehand) holds
 * leases the same way, one per range. Any other run holds the pipeline lease exclusively.
 */
async function acquireLeases(provider: LeaseProvider, pipeline: PipelineConfig, streams: readonly StreamConfig[], options: RunOptions): Promise<RunLeases> {
  const ttl = { ttlMs: pipeline.lockTtlMs, onWarning: (message: string) => options.logger?.log('warn', message) };
  const partitions = options.partitions ?? [];
  // A range job loads ranges of a build planned beforehand, like a partition job its partitions.
  const ranges = options.rangeJob !== undefined ? rangeLeaseNames(pipeline.name, streams, options.rangeJob) : [];
  const writers = provider.acquireShared !== undefined && concurrentPartitionWriters(pipeline.destination, pipeline.state);
  const partitionJob = partitions.length > 0 && options.full !== true && streams.every((s) => s.strategy === 'partitioned') && writers;
  const rangeJob = ranges.length > 0 && streams.length === 1 && writers;
  if (!partitionJob && !rangeJob) return { pipeline: await provider.acquire(pipeline.name, ttl) };
  const names = rangeJob ? ranges : streams.flatMap((s) => partitions.map((partition) => partitionLeaseName(pipeline.name, s.name, partition)));
  const shared = await provider.acquireShared!(pipeline.name, ttl);
  const own = new Map<string, Lease>();
  try {
    for (const name of names) own.set(name, await provider.acquire(name, ttl));
  } catch (error) {
    for (const l of own.values()) await l.release();
    await shared.release();
    throw error;
  }
  return { pipeline: shared, partitions: own };
}

interface RunContext {
  readonly pipeline: PipelineConfig;
  readonly runId: string;
  readonly startedAt: string;
  readonly streams: readonly StreamConfig[];
  readonly destination: Destination;
  readonly source: Source;
  readonly lease: Lease;
  readonly partitionLeases: ReadonlyMap<string, Lease> | undefined;
  readonly options: RunOptions;
  readonly logger: Logger;
  readonly observer: RunObserver;
  /** The state line of the lane this stream loads on, when streams load side by side. */
  readonly line?: StateLine;
}

/** Sources whose reads take a caller's upper bound (`ReadRequest.untilAtMost`). */
const BOUNDED_SOURCES: ReadonlySet<string> = new Set(['postgres', 'mysql', 'mariadb', 'sqlite']);

async function runStreams(ctx: RunContext): Promise<StreamResult[]> {
  const { pipeline, destination } = ctx;
  // Only a run holding the pipeline exclusively knows that no other run is going: a partition job must not mark the
  // records of its neighbours as interrupted.
  if (ctx.partitionLeases === undefined) await destination.state.closeInterruptedRuns(pipeline.name);
  let state = (await destination.state.load(pipeline.name)) ?? emptyState(pipeline.name);
  // A cursor column or key changed in the YAML stops the whole run before anything is read (a config error, exit 2).
  for (const stream of ctx.streams) {
    try {
      checkStoredColumns(stream, state.streams[stream.name], ctx.options.full === true);
    } catch (error) {
      throw withContext(error, { pipeline: pipeline.name }, 'config');
    }
  }
  if (ctx.options.until !== undefined && !BOUNDED_SOURCES.has(pipeline.source.type)) {
    throw new ConfigError(`--until: a ${pipeline.source.type} source cannot stop its reads at a chosen cursor value (${[...BOUNDED_SOURCES].join(', ')} sources can)`, {
      context: { pipeline: pipeline.name, phase: 'config' },
    });
  }
  await checkLookbacks(ctx.source, ctx.streams).catch((error: unknown) => {
    throw withContext(error, { pipeline: pipeline.name }, 'config');
  });
  const together = { pipeline: pipeline.name, runId: ctx.runId, source: ctx.source, destination, lease: ctx.lease, full: ctx.options.full === true };
  await planReadsTogether(together, ctx.streams, state);
  const results: StreamResult[] = [];
  // Log streams read one change log together (a source transaction spanning tables commits once): loaded as one, at
  // the place of the first.
  const logStreams = ctx.streams.filter((s) => s.strategy === 'log');
  // `concurrency:` streams of their own load side by side, at the place of the first; the others keep their order.
  const sideStreams = sideBySideStreams(ctx);
  const sideBySide = new Set(sideStreams.map((s) => s.name));
  for (const stream of ctx.streams) {
    if (stream.strategy === 'log') {
      if (stream !== logStreams[0]) continue;
      for (const s of logStreams) ctx.observer.streamStarted(s.name, 'log');
      const outcome = await runLogStreams(ctx, logStreams, state);
      state = await recordQuietRuns(quietContext(ctx), outcome.state, outcome.results);
      results.push(...outcome.results);
      for (const r of outcome.results) ctx.observer.streamFinished(r, 'log');
      continue;
    }
    if (sideBySide.has(stream.name)) {
      if (stream !== sideStreams[0]) continue;
      const line = new StateLine(state);
      for (const r of await runSideBySide(ctx, sideStreams, line)) results.push(r);
      state = await recordQuietRuns(quietContext(ctx), line.state, results.filter((r) => sideBySide.has(r.stream)));
      continue;
    }
    const loaded = await loadOne(ctx, stream, state);
    state = loaded.state === undefined ? ((await destination.state.load(pipeline.name)) ?? state) : ctx.partitionLeases === undefined ? await recordQuietRuns(quietContext(ctx), loaded.state, [loaded.result]) : loaded.state;
    results.push(loaded.result);
    finished(ctx, stream, loaded);
  }
  await storeSharedResume(together, ctx.streams, state, results);
  return results;
}

/** The streams this run loads side by side: with `concurrency` above 1, those loading on their own, when two or more. */
function sideBySideStreams(ctx: RunContext): StreamConfig[] {
  const concurrency = ctx.pipeline.concurrency ?? 1;
  // A partition job's and a read shared by streams (an Airbyte connector's one read) keep one lane.
  if (concurrency <= 1 || ctx.partitionLeases !== undefined || ctx.source.readTogether !== undefined) return [];
  const alone = ctx.streams.filter(loadsAlone);
  return alone.length > 1 ? alone : [];
}

/**
 * `streams` on up to `concurrency` lanes: the run's own ends, and for each further lane a source and a destination
 * opened for it (closed again at the end). Every lane commits through `line`.
 */
async function runSideBySide(ctx: RunContext, streams: readonly StreamConfig[], line: StateLine): Promise<StreamResult[]> {
  const count = Math.min(ctx.pipeline.concurrency ?? 1, streams.length);
  const lanes: Lane[] = [{ source: ctx.source, destination: line.destination(ctx.destination) }];
  const opened: { source: Source; destination: Destination }[] = [];
  try {
    while (lanes.length < count) {
      const ends = ctx.pipeline.destination.type === 'files' ? { source: await openLaneSource(ctx), destination: sharedWriter(ctx.destination) } : await openEnds(ctx.pipeline, ctx.logger);
      opened.push(ends);
      lanes.push({ source: ends.source, destination: await laneDestination(ctx, ends.destination, line) });
    }
    return await loadSideBySide(streams, lanes, async (lane, stream) => {
      const laneCtx: RunContext = { ...ctx, source: lane.source, destination: lane.destination, line };
      const loaded = await loadOne(laneCtx, stream, line.state);
      finished(ctx, stream, loaded);
      return loaded.result;
    });
  } finally {
    for (const ends of opened) {
      await ends.source.close().catch(() => undefined);
      await ends.destination.close().catch(() => undefined);
    }
  }
}

/**
 * A lane's own source, beside the run's destination: the lake's lanes share the run's one destination, whose
 * transactions run side by side (a second instance would collect the first one's uncommitted objects as leftovers).
 */
async function openLaneSource(ctx: RunContext): Promise<Source> {
  return openSource(ctx.pipeline.source, ctx.logger).catch((e: unknown) => {
    throw withContext(e, { pipeline: ctx.pipeline.name, phase: 'connect' }, 'source');
  });
}

/** A further destination connection of the run, made ready to load beside the run's own, committing through `line`. */
async function laneDestination(ctx: RunContext, opened: Destination, line: StateLine | undefined): Promise<Destination> {
  // Its data session carries the lease token in its name, as the run's own does (Postgres: a later holder finds it by
  // that name, and a source's safe mark does not mistake it for one of tidemark's read sessions).
  await cutOffOlderHolders(opened, ctx.lease, ctx.logger);
  const observed = ctx.observer === NO_OBSERVER ? opened : observedDestination(opened, ctx.observer);
  return line === undefined ? observed : line.destination(observed);
}

/**
 * How a ranged load opens its further writers, where the destination holds the state: on Postgres a connection each; on
 * the lake, transactions side by side on the run's own destination (each uploads objects under names of its own; a
 * second instance would collect the first one's uncommitted objects as leftovers). Undefined elsewhere: one writer.
 */
function rangeWriterOpener(ctx: RunContext): (() => Promise<Destination>) | undefined {
  if (ctx.partitionLeases !== undefined || !takesRangeWriters(ctx.pipeline)) return undefined;
  if (ctx.pipeline.destination.type === 'files') return async () => sharedWriter(ctx.destination);
  return async () => {
    const opened = await openPipelineDestination(ctx.pipeline, ctx.logger);
    try {
      return await laneDestination(ctx, opened, ctx.line);
    } catch (error) {
      await opened.close().catch(() => undefined);
      throw error;
    }
  };
}

/** A failed stream (no state) has its failure printed by the caller; a loaded one is told of its rejects here. */
function finished(ctx: RunContext, stream: StreamConfig, loaded: { state?: PipelineState; result: StreamResult }): void {
  ctx.observer.streamFinished(loaded.result, stream.strategy);
  if (loaded.state !== undefined) warnOfRejects(ctx, stream, loaded.result);
}

/**
 * One stream of its own (not a log stream), through `ctx`'s ends. Its failure becomes its result (recorded), except
 * a lost lease and a stop on purpose, which end the run. `state` undefined: the stream failed (reload the stored one).
 */
async function loadOne(ctx: RunContext, stream: StreamConfig, state: PipelineState): Promise<{ state?: PipelineState; result: StreamResult }> {
  const { pipeline, destination } = ctx;
  ctx.observer.streamStarted(stream.name, stream.strategy);
  const started = monotonicMs();
  let durable: StreamResult | undefined;
  try {
    const load =
      stream.strategy === 'partitioned'
        ? partitionLoader(ctx.options.reload, ctx.options.partitions, ctx.partitionLeases)
        : ctx.options.rangeJob !== undefined
          ? rangeJobLoader(ctx.options.rangeJob, ctx.partitionLeases)
          : loadStream;
    const openWriter = rangeWriterOpener(ctx);
    const outcome = await load(
      {
        pipeline: pipeline.name,
        runId: ctx.runId,
        startedAt: ctx.startedAt,
        source: ctx.source,
        destination,
        lease: ctx.lease,
        full: ctx.options.full === true,
        ...(ctx.options.strict ? { strict: true } : {}),
        ...(ctx.options.until !== undefined ? { until: ctx.options.until } : {}),
        ...(ctx.options.signal ? { signal: ctx.options.signal } : {}),
        ...(ctx.options.worker !== undefined ? { worker: ctx.options.worker } : {}),
        onCommit: (result: StreamResult) => (durable = result),
        ...(ctx.options.onProgress ? { onProgress: ctx.options.onProgress } : {}),
        onWarning: (name: string, message: string) => ctx.logger.log('warn', `pipeline ${pipeline.name}, stream ${name}: ${message}`, { pipeline: pipeline.name, stream: name, run_id: ctx.runId }),
        ...(openWriter !== undefined ? { openWriter } : {}),
      },
      stream,
      pipeline.stateless ? withoutPosition(state, stream.name) : state,
    );
    return { state: outcome.state, result: outcome.result };
  } catch (error) {
    const failure = withContext(destinationFileError(error, pipeline), { pipeline: pipeline.name, stream: stream.name }, 'source');
    // A fenced or displaced run must stop touching the pipeline at once.
    if (failure instanceof ConflictError) throw failure;
    if (ctx.options.signal?.aborted) {
      // Stopped on purpose: the record says so now, with what did commit, instead of staying 'running'.
      await recordFailure(ctx, failedResult(stream.name, failure, started, durable), 'stopped', stopReason(ctx.options.signal));
      throw failure;
    }
    // Not logged here: the result carries the failure and every caller prints it once (the CLI, the scheduler, a worker).
    const failed = failedResult(stream.name, failure, started, durable);
    await recordFailure(ctx, failed);
    return { result: failed };
  }
}

async function runLogStreams(ctx: RunContext, streams: readonly StreamConfig[], state: PipelineState): Promise<{ state: PipelineState; results: readonly StreamResult[] }> {
  const started = monotonicMs();
  let durable: StreamResult | undefined;
  const pipeline = ctx.pipeline;
  try {
    return await loadLogStreams(
      {
        pipeline: pipeline.name,
        runId: ctx.runId,
        startedAt: ctx.startedAt,
        source: ctx.source,
        destination: ctx.destination,
        lease: ctx.lease,
        full: false,
        ...(ctx.options.signal ? { signal: ctx.options.signal } : {}),
        ...(ctx.options.worker !== undefined ? { worker: ctx.options.worker } : {}),
        onCommit: (result: StreamResult) => (durable = result),
        ...(ctx.options.onProgress ? { onProgress: ctx.options.onProgress } : {}),
        onWarning: (name: string, message: string) => ctx.logger.log('warn', `pipeline ${pipeline.name}, stream ${name}: ${message}`, { pipeline: pipeline.name, stream: name, run_id: ctx.runId }),
      },
      streams,
      state,
      { follow: ctx.options.follow === true },
    );
  } catch (error) {
    const failure = withContext(destinationFileError(error, pipeline), { pipeline: pipeline.name, stream: streams[0]!.name }, 'source');
    if (failure instanceof ConflictError) throw failure;
    if (ctx.options.signal?.aborted) {
      await recordFailure(ctx, failedResult(streams[0]!.name, failure, started, durable), 'stopped', stopReason(ctx.options.signal));
      // A signal is how `run --follow` ends, also when it lands inside a source read: what committed stands (exit 0).
      const last = durable as StreamResult | undefined;
      if (ctx.options.follow === true && last !== undefined) {
        return { state: (await ctx.destination.state.load(pipeline.name)) ?? state, results: streams.map((s) => ({ ...last, stream: s.name, outcome: 'committed' as const })) };
      }
      throw failure;
    }
    // A config refusal (no change log, a destination that cannot apply it) stops the run like other config errors.
    if (failure.kind === 'config') throw failure;
    const failed = failedResult(streams[0]!.name, failure, started, durable);
    await recordFailure(ctx, failed);
    return { state: (await ctx.destination.state.load(pipeline.name)) ?? state, results: streams.map((s) => ({ ...failed, stream: s.name })) };
  }
}

function quietContext(ctx: RunContext): QuietRunContext {
  return { ...ctx, ...(ctx.options.worker !== undefined ? { worker: ctx.options.worker } : {}) };
}

/** `on_reject: warn`: a run that rejected rows says so, with where to find them. */
function warnOfRejects(ctx: RunContext, stream: StreamConfig, result: StreamResult): void {
  if (stream.onReject !== 'warn' || result.rowsRejected === 0) return;
  const where = `tidemark rejects ${ctx.pipeline.file ?? ctx.pipeline.name} --stream ${stream.name}`;
  ctx.logger.log(
    'warn',
    `pipeline ${ctx.pipeline.name}, stream ${stream.name}: ${result.rowsRejected} of ${result.rowsRead} rows read were rejected and not loaded; see \`${where}\` (on_reject: fail stops the stream instead, continue keeps quiet)`,
    { pipeline: ctx.pipeline.name, stream: stream.name, run_id: ctx.runId },
  );
}

/** The failure is recorded outside any data transaction, with the counts of what did commit. */
async function recordFailure(ctx: RunContext, failed: StreamResult, outcome: 'failed' | 'stopped' = 'failed', error = failed.error ?? null): Promise<void> {
  await ctx.destination.state
    .recordFailure({
      runId: ctx.runId,
      pipeline: ctx.pipeline.name,
      stream: failed.stream,
      startedAt: ctx.startedAt,
      finishedAt: finishedAt(ctx.startedAt),
      outcome,
      rowsRead: failed.rowsRead,
      rowsLoaded: failed.rowsLoaded,
      rowsRejected: failed.rowsRejected,
      commits: failed.commits,
      cursorMin: failed.cursorMin,
      cursorMax: failed.cursorMax,
      full: failed.full,
      worker: ctx.options.worker ?? `${hostname()}:${process.pid}`,
      error,
    })
    .catch(async (e: unknown) => {
      ctx.logger.log('warn', `could not record the failure of stream ${failed.stream}: ${errorMessage(e)}`);
      // Its session to the store is gone: the run's end is recorded over a new one, where its records still say running.
      await settleRun(ctx.destination.state, ctx, error ?? 'failed', outcome);
    });
}

/**
 * A run that ends by an error (a lost lease, a stop, a destination gone around a commit) may have left its records
 * `running`, its session to the store lost: they are settled over a new session (see StateStore.settleRun).
 */
async function settleRun(
  store: StateStore,
  ctx: Pick<RunContext, 'pipeline' | 'runId' | 'startedAt' | 'options' | 'logger'>,
  failure: unknown,
  outcome: 'failed' | 'stopped' = ctx.options.signal?.aborted ? 'stopped' : 'failed',
): Promise<void> {
  if (store.settleRun === undefined) return;
  const error = typeof failure === 'string' ? failure : outcome === 'stopped' && ctx.options.signal ? stopReason(ctx.options.signal) : errorMessage(failure);
  await store
    .settleRun({ runId: ctx.runId, pipeline: ctx.pipeline.name, outcome, finishedAt: finishedAt(ctx.startedAt), error })
    .catch((e: unknown) => ctx.logger.log('warn', `pipeline ${ctx.pipeline.name}: could not record the end of run ${ctx.runId}; the next run records it as interrupted: ${errorMessage(e)}`));
}

function stopReason(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  const why = reason instanceof Error ? reason.message : typeof reason === 'string' ? reason : 'stopped';
  return `stopped (${why}): the uncommitted part was rolled back; the counts are those of its commits`;
}

/** Counts of a failed stream are those of its last commit: what is durable, and balanced (read = loaded + rejected). */
function failedResult(stream: string, error: TidemarkError, started: number, durable: StreamResult | undefined): StreamResult {
  return {
    ...nothingLoaded(stream, started, false),
    ...durable,
    outcome: 'failed',
    durationMs: elapsedMs(started),
    error: errorMessage(error),
    errorKind: error.kind,
    ...(error.context.phase !== undefined ? { errorPhase: error.context.phase } : {}),
  };
}

export function selectStreams(pipeline: PipelineConfig, names: readonly string[] | undefined): StreamConfig[] {
  if (!names || names.length === 0) return [...pipeline.streams];
  return names.map((name) => {
    const stream = pipeline.streams.find((s) => s.name === name);
    if (!stream) {
      throw new TidemarkError('usage', `pipeline ${pipeline.name} has no stream ${name} (streams: ${pipeline.streams.map((s) => s.name).join(', ')})`);
    }
    return stream;
  });
}
