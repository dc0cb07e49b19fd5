import { loadPipeline, planPipeline, type StreamPlanReport } from '../../index.js';
import { resolvePipelines } from '../../config/pipeline-names.js';
import { formatCount, print, toJson } from '../output.js';
import { describeWatermark } from './run.js';

export interface PlanCommandOptions {
  readonly full?: boolean;
  readonly stream?: readonly string[];
  readonly json?: boolean;
  readonly dir?: string;
}

/** One pipeline: its reports (`--json`: one array); several: one array per pipeline, one per line. */
export async function planCommand(inputs: readonly string[], options: PlanCommandOptions): Promise<number> {
  for (const file of await resolvePipelines(inputs, options.dir !== undefined ? { dir: options.dir } : {})) await planOne(file, options);
  return 0;
}

async function planOne(file: string, options: PlanCommandOptions): Promise<void> {
  const pipeline = await loadPipeline(file);
  const reports = await planPipeline(pipeline, { ...(options.full ? { full: true } : {}), ...(options.stream?.length ? { streams: options.stream } : {}) });
  if (options.json) {
    print(toJson(reports));
    return;
  }
  for (const r of reports) {
    if (r.partitions !== undefined) {
      printPartitions(`${pipeline.name}.${r.stream}`, r);
      continue;
    }
    if (r.mode === 'log') {
      print(`${pipeline.name}.${r.stream}: log, write ${r.write}; ${r.predicate}`);
      for (const action of r.setup ?? []) print(`  setup: ${action}`);
      for (const warning of r.warnings) print(`  warning: ${warning}`);
      printRanges(r);
      continue;
    }
    print(`${pipeline.name}.${r.stream}: ${r.strategy}, write ${r.write}${r.mode === 'build' ? `, builds a new generation${r.resumesBuild ? ' (resuming)' : ''}` : ''}`);
    print(`  watermark: ${describeWatermark(r.watermark)}`);
    if (r.concurrency !== undefined) print(`  side by side with the pipeline's other streams, ${r.concurrency} at once`);
    if (r.stateDiffers !== undefined) print(`  state: ${r.stateDiffers}`);
    if (r.from) print(`  lookback from: ${r.from.value}`);
    print(`  until (high mark): ${r.until?.value ?? '(none: nothing to read)'}`);
    if (r.storedSafeMark) print(`  stored safe mark: ${r.storedSafeMark.value}`);
    if (r.safeMark) print(`  safe mark now: ${r.safeMark.value}`);
    for (const warning of r.warnings) print(`  warning: ${warning}`);
    printSchema(r);
    print(`  predicate: ${r.predicate}`);
    print(`  bindings: ${JSON.stringify(r.bindings)}`);
    if (r.nullCursorRows > 0) print(`  rows with a NULL cursor: ${r.nullCursorRows}`);
    printRanges(r);
  }
}

/** A read loaded as ranges: each range, its expected rows, and whether it is committed (a load under way). */
function printRanges(r: StreamPlanReport): void {
  if (r.ranged === undefined) return;
  const { readers, writers, ranges } = r.ranged;
  const done = ranges.filter((range) => range.done).length;
  const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
  print(`  ranges: ${ranges.length} (${done} committed), ${plural(readers, 'reader')} at once, ${plural(writers, 'writer')}`);
  if (r.ranged.startsOver) print('  the load under way was planned in another snapshot, in which rows may have moved between ranges: it starts over');
  for (const range of ranges) print(`    ${range.done ? 'done   ' : 'to load'}  ${range.id}${range.estimatedRows !== undefined ? `  ~${formatCount(range.estimatedRows)} rows` : ''}`);
}

/** A partitioned stream: what the next run loads, reloads or stops at; unchanged partitions only counted. */
function printPartitions(name: string, r: StreamPlanReport): void {
  const partitions = r.partitions ?? [];
  const acted = partitions.filter((p) => p.action !== 'skip' || p.status !== 'unchanged' || p.failure !== undefined);
  const unchanged = partitions.length - acted.length;
  const loads = partitions.filter((p) => p.action === 'load' || p.action === 'reload').length;
  print(`${name}: partitioned, write ${r.write}; ${loads} partition${loads === 1 ? '' : 's'} to load, ${unchanged} unchanged`);
  for (const p of acted) {
    const files = `${p.files} file${p.files === 1 ? '' : 's'}, ${formatCount(p.bytes)} bytes`;
    print(`  ${p.action.padEnd(6)}  ${p.partition}  ${p.status}${p.change !== undefined ? `: ${p.change}` : ''} (${files})`);
    if (p.failure !== undefined) print(`          last load failed at ${p.failure.failedAt} (run ${p.failure.runId}): ${p.failure.error}`);
  }
  for (const warning of r.warnings) print(`  warning: ${warning}`);
}

/** Pending schema changes: each change, the conversions the run makes, or why it will stop. */
function printSchema(r: StreamPlanReport): void {
  if (r.schema === undefined) return;
  for (const change of r.schema.changes) print(`  schema change: ${change}`);
  for (const widen of r.schema.widens) print(`  widens: ${widen}`);
  if (r.schema.stop !== undefined) print(`  stops: ${r.schema.stop}`);
  if (r.schema.restartsBuild !== undefined) print(`  restarts the build: ${r.schema.restartsBuild}; --full builds the table again from the source as it is now`);
}
