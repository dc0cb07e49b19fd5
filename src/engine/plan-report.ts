/** `tidemark plan`: what the next run would read per stream, with the exact predicate and bound values. */
import type { LogState, PartitionFailure, StreamSchema, StreamState, TypedValue, Watermark } from '../core/types.js';
import type { Destination, Source } from '../core/connector.js';
import { errorMessage, withContext } from '../core/errors.js';
import type { PipelineConfig, StreamConfig } from '../config/load.js';
import { openDestination, openSource } from '../registry/index.js';
import { ledgerOf, planPartitions, type PartitionPlan } from './partition-load.js';
import { checkLookback, lookbackProblem, planStream, settleKey, withSourceKey, type StreamPlan } from './plan.js';
import { evaluateSchema, restartsBuild, schemaInput, withFoldedCase } from './schema-check.js';
import { describeChange, typeName } from '../core/schema-diff.js';
import { plannedState } from './state-sync.js';
import { selectStreams } from './run.js';
import { withoutPosition } from './stateless.js';
import { plannedRanges, rangeReports, rangeSizing, readerCount, readsAsRanges, type RangePlanReport } from './range-load.js';
import { mayReadAsRanges, rangesWanted } from './range-default.js';
import { rangedCopyStart } from './log-range-copy.js';
import { takesRangeWriters } from './range-writers.js';
import { loadsAlone } from './side-by-side.js';

/** A partition of a partitioned stream, as the next run would treat it. */
export interface PartitionPlanReport {
  readonly partition: string;
  /**
   * Against the ledger: never loaded, loaded and unchanged, changed since (size, ETag, hash, files added/gone), or
   * loaded but none of its files listed any more (`source missing`).
   */
  readonly status: 'new' | 'changed' | 'unchanged' | 'source missing';
  /**
   * What the next run does with it: `load` a new one, `reload` a changed one, `skip`, stop (`error`: on_change or
   * on_missing error), or for a source missing one `keep` its rows or `delete` them (on_missing).
   */
  readonly action: 'load' | 'reload' | 'skip' | 'error' | 'keep' | 'delete';
  readonly files: number;
  readonly bytes: number;
  readonly change?: string;
  /** The partition's last load failed (and nothing loaded it since). */
  readonly failure?: PartitionFailure;
}

export interface StreamPlanReport {
  readonly stream: string;
  readonly strategy: string;
  readonly write: string;
  /**
   * `incremental` reads past the watermark; `build` writes a new generation beside the live table; `partitions`
   * loads the partitions listed in `partitions` (the watermark fields are then empty).
   */
  readonly mode: 'incremental' | 'build' | 'partitions' | 'log';
  /** Log streams: what set-up the next run does in the source (publication, slot), one line each. */
  readonly setup?: readonly string[];
  readonly partitions?: readonly PartitionPlanReport[];
  readonly resumesBuild: boolean;
  readonly watermark: Watermark | null;
  readonly from: TypedValue | null;
  readonly until: TypedValue | null;
  readonly predicate: string;
  readonly bindings: readonly string[];
  readonly nullCursorRows: number;
  /** The safe mark stored by the last commit: the next run re-reads from it when it is below the watermark. */
  readonly storedSafeMark: TypedValue | null;
  /** The safe mark a run starting now would store (oldest open transaction, clock skew), when the source knows one. */
  readonly safeMark: TypedValue | null;
  readonly warnings: readonly string[];
  /**
   * With a separate state store ahead of the destination: how the store's state of this stream differs from the
   * destination's, which the run uses (the destination is the authority).
   */
  readonly stateDiffers?: string;
  /** How the source's schema differs from the committed one, and what the next run does about it (absent: no change). */
  readonly schema?: SchemaPlanReport;
  /** A read loaded as ranges (`parallel:`): how many readers, and each range with whether it is committed already. */
  /** `concurrency:` this stream loads side by side with the pipeline's other streams, this many at once. */
  readonly concurrency?: number;
  readonly ranged?: {
    readonly readers: number;
    /** Writers loading the ranges at once: up to `readers` into Postgres and the lake, one into DuckDB and SQLite. */
    readonly writers: number;
    readonly ranges: readonly RangePlanReport[];
    /** The load under way was planned in another snapshot and its rows may have moved: it starts over (docs/ranges.md). */
    readonly startsOver?: true;
  };
}

/** Pending schema changes of a stream (see src/engine/schema-check.ts). */
export interface SchemaPlanReport {
  /** One line per change, as the run reports it. */
  readonly changes: readonly string[];
  /** Destination columns the run converts to a wider type before its rows land. */
  readonly widens: readonly string[];
  /** Why the run will stop the stream, when it will (nothing of it is then written). */
  readonly stop?: string;
  /**
   * `plan --full` of a stream whose build under way cannot take the source's columns: why the run starts that build
   * again from the source (rather than stopping); `changes` and `widens` are then those of the new build.
   */
  readonly restartsBuild?: string;
}

export async function planPipeline(
  pipeline: PipelineConfig,
  options: { full?: boolean; streams?: readonly string[]; openTimeoutMs?: number } = {},
): Promise<StreamPlanReport[]> {
  // The same one-line error a run gives: naming the pipeline (and the stream and phase where they are known).
  return planStreams(pipeline, options).catch((error: unknown) => {
    throw withContext(error, { pipeline: pipeline.name }, 'source');
  });
}

async function planStreams(
  pipeline: PipelineConfig,
  options: { full?: boolean; streams?: readonly string[]; openTimeoutMs?: number },
): Promise<StreamPlanReport[]> {
  const streams = selectStreams(pipeline, options.streams);
  const destination = await openDestination(pipeline.destination, options.openTimeoutMs !== undefined ? { openTimeoutMs: options.openTimeoutMs } : {});
  // Asked after the destination is closed: whether a type converts in place depends only on its kind.
  const widens = { capabilities: destination.capabilities, ...(destination.widens ? { widens: destination.widens.bind(destination) } : {}) };
  let states: Readonly<Record<string, StreamState>>;
  let differs = new Map<string, string>();
  let source: Source | undefined;
  const partitioned = new Map<string, StreamPlanReport>();
  // Ledger rows of streams read as ranges: which ranges of a load under way are committed.
  const rangeRows = new Map<string, ReadonlySet<string>>();
  const keepsLedger = destination.ledger !== undefined;
  const rowGroup = destination.capabilities.bulkRowGroup;
  try {
    for (const stream of streams.filter((s) => mayReadAsRanges(s) && s.strategy !== 'partitioned' && destination.ledger !== undefined)) {
      rangeRows.set(stream.name, new Set((await destination.ledger!.list(pipeline.name, stream.name)).map((e) => e.partition)));
    }
    // With a separate state store, the state the run would reconcile to (the store may be ahead of the destination).
    const planned = await plannedState(pipeline, destination.state);
    states = pipeline.stateless ? streams.reduce((state, s) => withoutPosition(state, s.name), planned.state).streams : planned.state.streams;
    differs = new Map((planned.differences ?? []).map((d) => [d.stream, `the store holds ${d.store}, the destination ${d.destination}`]));
    // Partitions are planned against the ledger, which lives in the destination: only then is the source opened first.
    for (const stream of streams.filter((s) => s.strategy === 'partitioned')) {
      source ??= await openSource(pipeline.source);
      const listed: string[] = [];
      const plans = await planPartitions({ source, destination, pipeline: pipeline.name, onWarning: (_s, m) => listed.push(m) }, stream);
      const failures = await ledgerOf(destination, pipeline.name, stream.name).failures(pipeline.name, stream.name);
      const report = partitionReport(stream, plans, failures);
      partitioned.set(stream.name, { ...report, warnings: [...listed, ...report.warnings] });
    }
  } catch (error) {
    await source?.close();
    throw error;
  } finally {
    await destination.close();
  }
  source ??= await openSource(pipeline.source);
  // `concurrency:` the streams the run loads side by side (as run.ts picks them).
  const alone = (pipeline.concurrency ?? 1) > 1 && source.readTogether === undefined ? streams.filter(loadsAlone) : [];
  const sideBySide = new Set(alone.length > 1 ? alone.map((s) => s.name) : []);
  try {
    const reports: StreamPlanReport[] = [];
    const logged = await logReports(source, pipeline, streams.filter((s) => s.strategy === 'log'), states, keepsLedger ? rangeRows : undefined, rowGroup);
    for (const configured of streams) {
      const planned = partitioned.get(configured.name) ?? logged.get(configured.name);
      if (planned !== undefined) {
        reports.push(planned);
        continue;
      }
      const inStreamContext = (error: unknown) => {
        throw withContext(error, { stream: configured.name, phase: 'plan' }, 'source');
      };
      const stream = await withSourceKey(source, configured).catch(inStreamContext);
      const prior = states[stream.name];
      const run = { full: options.full === true, runId: 'plan' };
      let plan = planStream(stream, prior, run);
      let read = withFoldedCase(await source.open(plan.request).catch(inStreamContext), widens, { pipeline: pipeline.name, stream: stream.name });
      try {
        try {
          checkLookback(stream, read.schema);
        } catch (error) {
          inStreamContext(error);
        }
        let schema = schemaPlan(pipeline.name, stream, plan, prior, read.schema, options.full === true, widens);
        // `--full` starts a build under way again when its columns cannot take the source's (as the run does).
        if (schema?.stop !== undefined && restartsBuild(plan, run)) {
          const restart = schema.stop.split('; nothing of this stream')[0]!;
          await read.close();
          const { build: _build, resume: _resume, ...afresh } = prior!;
          plan = planStream(stream, afresh, run);
          read = withFoldedCase(await source.open(plan.request).catch(inStreamContext), widens, { pipeline: pipeline.name, stream: stream.name });
          schema = { ...(schemaPlan(pipeline.name, stream, plan, afresh, read.schema, true, widens) ?? { changes: [], widens: [] }), restartsBuild: restart };
        }
        const ends = { sourceSplits: source.ranges !== undefined, destinationKeepsLedger: keepsLedger, boundedRun: false };
        const ranges = readsAsRanges(ends, stream, plan, prior, read)
          ? await plannedRanges(source, stream, prior, rangeRows.get(stream.name) ?? new Set(), plan.generation !== undefined, takesRangeWriters(pipeline), rowGroup).catch(inStreamContext)
          : undefined;
        reports.push({
          stream: stream.name,
          strategy: stream.strategy,
          write: settleKey(stream, read.schema.primaryKey).write,
          mode: plan.generation !== undefined ? 'build' : 'incremental',
          resumesBuild: plan.generation !== undefined && !plan.freshBuild,
          watermark: prior?.watermark ?? null,
          from: plan.request.from ?? null,
          until: read.until,
          predicate: read.predicate,
          bindings: read.bindings,
          nullCursorRows: read.nullCursorRows,
          storedSafeMark: prior?.safeMark ?? null,
          safeMark: read.safeMark ?? null,
          warnings: read.warnings ?? [],
          ...(differs.has(stream.name) ? { stateDiffers: `${differs.get(stream.name)!}; the run uses the destination's` } : {}),
          ...(schema !== undefined ? { schema } : {}),
          ...(ranges !== undefined ? { ranged: ranges } : {}),
          ...(sideBySide.has(stream.name) ? { concurrency: pipeline.concurrency! } : {}),
        });
      } finally {
        await read.close();
      }
    }
    return reports;
  } finally {
    await source.close();
  }
}

/** The schema step the run would take, as a report; undefined when the schema is as committed. */
function schemaPlan(
  pipeline: string,
  stream: StreamConfig,
  plan: StreamPlan,
  prior: StreamState | undefined,
  now: StreamSchema,
  full: boolean,
  destination: Pick<Destination, 'widens' | 'capabilities'>,
): SchemaPlanReport | undefined {
  const verdict = evaluateSchema(schemaInput({ pipeline, full, destination }, stream, plan, prior, now));
  if (verdict.stop !== undefined) return { changes: verdict.changes.map(describeChange), widens: [], stop: verdict.stop };
  const { step } = verdict;
  if (step.changes.length === 0) return undefined;
  return { changes: step.changes.map(describeChange), widens: step.widen.map((w) => `${w.column} ${typeName(w.from)} → ${typeName(w.to)}`) };
}

/** Log streams: the set-up a run would do (a dry run in the source) and where each stream continues. */
async function logReports(
  source: Source,
  pipeline: PipelineConfig,
  streams: readonly StreamConfig[],
  states: Readonly<Record<string, StreamState>>,
  rangeRows: ReadonlyMap<string, ReadonlySet<string>> | undefined,
  rowGroup: number | undefined,
): Promise<Map<string, StreamPlanReport>> {
  const out = new Map<string, StreamPlanReport>();
  if (streams.length === 0) return out;
  const log = source.changeLog;
  if (log === undefined) throw withContext(new Error(`a ${pipeline.source.type} source has no change log (strategy: log)`), { stream: streams[0]!.name, phase: 'plan' }, 'config');
  const keyed = await Promise.all(streams.map((s) => withSourceKey(source, s)));
  const request = { pipeline: pipeline.name, tables: keyed.map((s) => ({ stream: s.name, table: s.table!, primaryKey: s.primaryKey })) };
  const maxRetained = Math.min(...streams.map((s) => s.log?.maxRetainedBytes ?? Number.POSITIVE_INFINITY));
  const setup = await log.setup(request, { dryRun: true, ...(Number.isFinite(maxRetained) ? { maxRetainedBytes: maxRetained } : {}) });
  for (const stream of keyed) {
    const state = states[stream.name]?.log;
    const copying = state === undefined || !setup.exists || state.snapshot?.done === false;
    const predicate = copying
      ? `copy ${stream.table}${state?.snapshot?.afterPk ? ` above key ${state.snapshot.afterPk.map((v) => v.value).join(', ')}` : ''} from a snapshot consistent with the slot, then apply the changes after it`
      : `apply the changes committed after log position ${state.position}`;
    const ranged = copying && rangeRows !== undefined ? await logCopyRanges(source, stream, state, rangeRows.get(stream.name) ?? new Set(), rowGroup) : undefined;
    out.set(stream.name, {
      stream: stream.name,
      strategy: 'log',
      write: stream.write,
      mode: 'log',
      setup: setup.actions,
      resumesBuild: state?.snapshot?.done === false,
      watermark: null,
      from: null,
      until: null,
      predicate,
      bindings: [],
      nullCursorRows: 0,
      storedSafeMark: null,
      safeMark: null,
      warnings: setup.warnings,
      ...(ranged !== undefined ? { ranged } : {}),
    });
  }
  return out;
}

/**
 * The ranges a log stream's copy would be read in: those of a ranged copy a change log resumes in place (with which
 * are committed), else the table's ranges as planned now — the run plans them again in the slot's snapshot. One
 * writer applies them, as it applies the log.
 */
async function logCopyRanges(source: Source, stream: StreamConfig, log: LogState | undefined, loaded: ReadonlySet<string>, rowGroup: number | undefined): Promise<StreamPlanReport['ranged']> {
  const start = rangedCopyStart(stream, log);
  const readers = await readerCount(source, stream);
  if (start !== undefined && 'resumes' in start) {
    const { load, ranges } = start.resumes;
    return { readers, writers: 1, ranges: rangeReports(load, ranges, loaded) };
  }
  if (!mayReadAsRanges(stream)) return undefined;
  const planned = await source.ranges?.plan(stream, rangeSizing(stream, readers, false, rowGroup));
  await planned?.close();
  if (planned === undefined || !rangesWanted(stream, planned.ranges.reduce((n, r) => n + (r.estimatedRows ?? 0), 0))) return undefined;
  return {
    readers,
    writers: 1,
    // A plan made now: no range of it is committed.
    ranges: rangeReports('', planned.ranges, new Set()),
    ...(start !== undefined ? { startsOver: true as const } : {}),
  };
}

function partitionReport(stream: StreamConfig, plans: readonly PartitionPlan[], failures: readonly PartitionFailure[]): StreamPlanReport {
  const failed = new Map(failures.map((f) => [f.partition, f]));
  const partitions = plans.map((p): PartitionPlanReport => {
    const bytes = p.listing.files.reduce((sum, f) => sum + f.size, 0);
    const failure = failed.get(p.partition);
    const common = { partition: p.partition, files: p.listing.files.length, bytes, ...(failure !== undefined ? { failure } : {}) };
    if (p.status === 'missing') {
      if (p.entry?.status === 'deleted') return { ...common, status: 'source missing', action: 'skip', change: `its rows were deleted at ${p.entry.loadedAt} (run ${p.entry.runId})` };
      return { ...common, status: 'source missing', action: stream.onMissing, change: `${p.change!}; loaded by run ${p.entry!.runId} at ${p.entry!.loadedAt}` };
    }
    const status = p.status === 'reload' ? 'changed' : p.status;
    const action = p.status === 'new' ? 'load' : p.status === 'unchanged' ? 'skip' : stream.onChange === 'reload' ? 'reload' : stream.onChange === 'error' ? 'error' : 'skip';
    return { ...common, status, action, ...(p.change !== undefined ? { change: p.change } : {}) };
  });
  const ignored = partitions.filter((p) => p.status === 'changed' && stream.onChange === 'ignore');
  return {
    stream: stream.name,
    strategy: stream.strategy,
    write: stream.write,
    mode: 'partitions',
    partitions,
    resumesBuild: false,
    watermark: null,
    from: null,
    until: null,
    predicate: '',
    bindings: [],
    nullCursorRows: 0,
    storedSafeMark: null,
    safeMark: null,
    warnings: ignored.map((p) => `partition ${p.partition} changed (${p.change}); on_change: ignore keeps the loaded rows`),
  };
}

/**
 * What `tidemark validate` can only know from the source's catalog: a `lookback` on a cursor that is not a date or
 * timestamp. Only streams with a lookback are described, so other pipelines validate without connecting; a source
 * that cannot be reached (validate also runs where it is not) leaves the check undone, said in `unchecked`.
 * Each problem names the file and field (`file: streams[i].lookback: …`).
 */
export async function catalogProblems(pipeline: PipelineConfig, file: string): Promise<{ readonly problems: readonly string[]; readonly unchecked?: string }> {
  const indexed = pipeline.streams.map((stream, i) => ({ stream, i })).filter(({ stream }) => stream.lookbackMs !== undefined && stream.cursor !== undefined);
  if (indexed.length === 0) return { problems: [] };
  const unchecked = (error: unknown) => ({ problems: [], unchecked: `lookback not checked against the source's catalog (${errorMessage(error)})` });
  let source: Source;
  try {
    source = await openSource(pipeline.source);
  } catch (error) {
    return unchecked(error);
  }
  try {
    const problems: string[] = [];
    for (const { stream, i } of indexed) {
      const problem = lookbackProblem(stream, await source.discover(stream), `${file}: streams[${i}].lookback`);
      if (problem !== undefined) problems.push(problem);
    }
    return { problems };
  } catch (error) {
    return unchecked(error);
  } finally {
    await source.close();
  }
}
