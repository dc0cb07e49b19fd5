// Straight from the modules (not the index.ts barrel, which also loads the scheduler and the queue): a no-op
// `tidemark run` is mostly module loading, measured ~100 ms less this way.
import { writeOut } from '../../core/stdio.js';
import { loadPipeline } from '../../config/load.js';
import { run } from '../../engine/run.js';
import type { RunResult, StreamResult, Watermark } from '../../core/types.js';
import { stderrLogger, type LogFields } from '../../core/logger.js';
import { resolvePipelines } from '../../config/pipeline-names.js';
import { EXIT, exitCodeFor } from '../exit-codes.js';
import { verifyWhenDue } from '../../engine/verify-schedule.js';
import { errorMessage } from '../../core/errors.js';
import { formatCount, print, printError, toJson } from '../output.js';
import { progressDisplay } from '../progress.js';

export interface RunCommandOptions {
  readonly full?: boolean;
  readonly stream?: readonly string[];
  readonly json?: boolean;
  /** A files stream whose pattern matches no file fails instead of warning. */
  readonly strict?: boolean;
  /** Log at debug level: a connector's LOG lines and the stacks of its errors. */
  readonly verbose?: boolean;
  /** Log streams keep applying changes until SIGTERM/SIGINT. */
  readonly follow?: boolean;
  /** Incremental streams read up to this cursor value; their watermark never passes it. */
  readonly until?: string;
  /** The folder pipeline names are looked up in (default: $TIDEMARK_PIPELINES_DIR, else ./pipelines, else .). */
  readonly dir?: string;
}

export function describeWatermark(w: Watermark | null | undefined): string {
  if (!w) return 'none';
  return [w.cursor.value, ...w.pk.map((p) => p.value)].join(' / ');
}

/** The fields of a failed stream's log line (`--log-format json`). */
function failureFields(pipeline: string, runId: string, s: StreamResult): LogFields {
  return { pipeline, stream: s.stream, run_id: runId, ...(s.errorPhase !== undefined ? { phase: s.errorPhase } : {}), ...(s.errorKind !== undefined ? { error_kind: s.errorKind } : {}) };
}

export function summary(pipeline: string, s: StreamResult): string {
  // Partitioned streams have a ledger instead of a watermark.
  const position =
    s.partitionsLoaded !== undefined
      ? `partitions loaded: ${s.partitionsLoaded.length ? s.partitionsLoaded.join(', ') : 'none'}, ${s.partitionsSkipped ?? 0} unchanged`
      : s.watermark === null && s.cursorMin === null && s.cursorMax !== null
        ? `log position ${s.cursorMax}` // strategy: log reports its position there, with no cursor range
        : `watermark ${describeWatermark(s.watermark)}`;
  const what =
    s.outcome === 'failed'
      ? `FAILED: ${s.error}`
      : `${formatCount(s.rowsRead)} read, ${formatCount(s.rowsLoaded)} loaded, ${formatCount(s.rowsRejected)} rejected` +
        ` in ${s.commits} commit${s.commits === 1 ? '' : 's'} (${(s.durationMs / 1000).toFixed(2)}s)` +
        `${s.full ? ', new generation' : ''}; ${position}`;
  return `${pipeline}.${s.stream}: ${what}`;
}

const STOPPING: readonly NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGHUP'];

/**
 * SIGTERM, SIGINT and SIGHUP (a closed terminal) stop the run between batches; what was not committed is rolled back
 * and the lease released. A second signal exits at once: the open transaction dies with the process (nothing of it
 * is committed) and a lease whose process is gone is taken over by the next run.
 */
function interruptions(): { signal: AbortSignal; code: () => number | undefined; dispose: () => void } {
  const controller = new AbortController();
  let received: NodeJS.Signals | undefined;
  const codeOf = (signal: NodeJS.Signals | undefined) =>
    signal === 'SIGTERM' ? EXIT.sigterm : signal === 'SIGINT' ? EXIT.sigint : signal === 'SIGHUP' ? EXIT.sighup : undefined;
  const handler = (signal: NodeJS.Signals) => {
    if (received !== undefined) {
      writeOut(2, `error: stopped at once by a second ${signal}: nothing uncommitted reaches the destination; the next run resumes from the last commit\n`);
      process.exit(codeOf(signal));
    }
    received = signal;
    controller.abort(new Error(`interrupted by ${signal}`));
  };
  for (const s of STOPPING) process.on(s, handler);
  return {
    signal: controller.signal,
    code: () => codeOf(received),
    dispose: () => {
      for (const s of STOPPING) process.off(s, handler);
    },
  };
}

export async function runCommand(files: readonly string[], options: RunCommandOptions): Promise<number> {
  const interrupt = interruptions();
  try {
    return await runAll(files, options, interrupt.signal);
  } catch (error) {
    const code = interrupt.code();
    if (code !== undefined) {
      printError(`interrupted: ${errorMessage(error)}; nothing uncommitted was kept`);
      return code;
    }
    throw error;
  } finally {
    interrupt.dispose();
  }
}

async function runAll(inputs: readonly string[], options: RunCommandOptions, signal: AbortSignal): Promise<number> {
  const files = await resolvePipelines(inputs, options.dir !== undefined ? { dir: options.dir } : {});
  let code: number = EXIT.ok;
  for (const file of files) {
    try {
      code = Math.max(code, await runOne(file, options, signal));
    } catch (error) {
      // One pipeline of several that cannot start (bad config, held lease) is reported once; the others still run.
      if (files.length === 1 || signal.aborted) throw error;
      printError(`error: ${errorMessage(error)}`);
      if (code === EXIT.ok || code === EXIT.failed) code = exitCodeFor(error);
    }
  }
  return code;
}

async function runOne(file: string, options: RunCommandOptions, signal: AbortSignal): Promise<number> {
  const started = new Date().toISOString();
  const pipeline = await loadPipeline(file).catch(jsonOnError(options, file, null, started));
  const progress = progressDisplay(pipeline.name, { json: options.json === true });
  let result: RunResult | undefined;
  try {
    result = await run(pipeline, {
      ...(options.full ? { full: true } : {}),
      ...(options.stream?.length ? { streams: options.stream } : {}),
      ...(options.strict ? { strict: true } : {}),
      logger: stderrLogger(options.verbose ? 'debug' : undefined, { write: progress.write }),
      ...(options.follow ? { follow: true } : {}),
      ...(options.until !== undefined ? { until: options.until } : {}),
      signal,
      onProgress: progress.onProgress,
    }).catch(jsonOnError(options, file, pipeline.name, started));
  } finally {
    progress.finish(result);
  }
  // A failed stream's line is its error, printed once, on stderr (with --json too: stdout is the data, stderr the log).
  if (options.json) print(toJson(result));
  for (const s of result.streams) {
    if (s.outcome === 'failed') printError(summary(pipeline.name, s), failureFields(pipeline.name, result.runId, s), 'error');
    else if (!options.json) print(summary(pipeline.name, s));
  }
  // `verify:` in the pipeline: a verify after the run when due (its lines go to the log; the result to the state).
  if (result.ok && !signal.aborted && pipeline.verify !== undefined) await verifyWhenDue(pipeline, { logger: stderrLogger(options.verbose ? 'debug' : undefined) });
  return result.ok ? EXIT.ok : EXIT.failed;
}

/**
 * `run --json` when no run result exists (a config error, another run holding the lease): an object of the same
 * shape with no streams and with the error, so a script reads one object per pipeline file whatever
 * happened. The error is rethrown for the one place that maps it to the exit code.
 */
function jsonOnError(options: RunCommandOptions, file: string, pipeline: string | null, started: string): (error: unknown) => never {
  return (error) => {
    if (options.json) {
      const finished = new Date().toISOString();
      print(toJson({ pipeline, file, run_id: null, started_at: started, finished_at: finished, ok: false, error: errorMessage(error), streams: [] }));
    }
    throw error;
  };
}
