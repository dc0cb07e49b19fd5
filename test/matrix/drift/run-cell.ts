/**
 * Runs one drift cell through the real CLI and checks it: every run accounts for its rows, and after the last run
 * the destination holds exactly the model's rows — every column's every value, the columns of before the change
 * for rows written before it and of after it for the rest — or, where the change cannot be held exactly, the run
 * failed naming the column and the destination holds nothing of the refused rows.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { cli, type CliResult } from '../../helpers/cli.js';
import { STREAM, type Canonical } from '../fixture.js';
import { checkRunJson, OracleError, type RunJson } from '../oracle.js';
import type { CellContext } from '../types.js';
import type { DriftCell } from './cells.js';
import type { DriftDestination } from './destinations.js';
import { BASE_COLUMNS, canonical, changeOf, columnsAfter, KIND, rowOf, type DriftColumn } from './model.js';
import type { DriftSource, DriftSourceInstance } from './sources.js';

/** Rows before the change and after it: together past two DuckDB chunks, several checkpoints and batches. */
export const BEFORE = 2_500;
export const AFTER = 2_600;

export interface DriftOutcome {
  readonly status: 'passed' | 'refused';
  /** The kill failpoint armed but never reached (no ALTER on this path). */
  readonly notFired?: boolean;
}

export async function runDriftCell(cell: DriftCell, source: DriftSource, destination: DriftDestination, ctx: CellContext, refusal: RegExp | undefined): Promise<DriftOutcome> {
  const src = await source.setup(ctx);
  try {
    return await drive(cell, source, src, destination, ctx, refusal);
  } finally {
    await src.cleanup();
    await destination.instance.cleanup();
  }
}

async function drive(cell: DriftCell, source: DriftSource, src: DriftSourceInstance, destination: DriftDestination, ctx: CellContext, refusal: RegExp | undefined): Promise<DriftOutcome> {
  const pipeline = `drift_${ctx.uid}`;
  const config = join(ctx.dir, 'pipeline.yaml');
  await writeFile(config, `name: ${pipeline}\n${src.yaml(cell.write)}\n${destination.instance.yaml}\n`);
  const env = { TIDEMARK_CONFIG_CACHE: 'off', ...destination.instance.env };
  const run = async (failpoints?: string): Promise<CliResult & { json: RunJson | undefined }> => {
    await destination.instance.beforeRun?.(pipeline);
    const out = await cli(['run', config, '--json'], { env: failpoints ? { ...env, TIDEMARK_FAILPOINTS: failpoints } : env });
    let json: RunJson | undefined;
    try {
      json = out.stdout.trim() ? (JSON.parse(out.stdout) as RunJson) : undefined;
    } catch {
      json = undefined;
    }
    if (out.signal !== 'SIGKILL') checkRunJson(out.code, json);
    return { ...out, json };
  };
  const ok = async (what: string, failpoints?: string) => {
    const r = await run(failpoints);
    if (r.code !== 0 && r.signal !== 'SIGKILL') throw new OracleError(`${what}: exit ${r.code}: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`);
    return r;
  };

  const before = [...BASE_COLUMNS];
  const after = columnsAfter(before, cell.change);
  /** Rows read before the change: all of the first run's, or what a first load killed part way committed. */
  let readBefore = BEFORE;
  await src.insert(before, undefined, 1, BEFORE + 1);
  if (cell.when !== 'inside') await ok('first run');
  else if (source.family === 'table') {
    const killed = await run('load.after_commit=1:kill');
    if (killed.signal !== 'SIGKILL') throw new OracleError(`the first run was to be killed after its first commit: exit ${killed.code}`);
    readBefore = (await destination.columns(pipeline, STREAM)).length === 0 ? 0 : (await destination.rows(pipeline, STREAM, ['id'])).length;
  }
  await src.alter(cell.change, before, after);
  await src.insert(after, cell.change, BEFORE + 1, BEFORE + AFTER + 1);
  let notFired = false;
  if (cell.when === 'kill') {
    const killed = await run('schema.after_widen=1:kill');
    notFired = killed.signal !== 'SIGKILL';
    if (notFired && killed.code !== 0 && refusal === undefined) throw new OracleError(`run with the kill armed: exit ${killed.code}: ${killed.stderr.trim().split('\n').slice(-3).join(' | ')}`);
  }
  const last = await run();

  if (refusal !== undefined) {
    if (last.code === 0) throw new OracleError(`expected a refusal matching ${refusal}, but the run exited 0`);
    if (!refusal.test(last.stderr)) throw new OracleError(`the refusal does not match ${refusal}: ${last.stderr.trim().split('\n').slice(-3).join(' | ')}`);
    if (!last.stderr.includes(`pipeline ${pipeline}, stream ${STREAM}`) || !last.stderr.includes('phase schema')) throw new OracleError(`the refusal does not name pipeline, stream and phase: ${last.stderr.trim()}`);
    if (source.family === 'files' && !last.stderr.includes('m-2024-02')) throw new OracleError(`the refusal does not name the file: ${last.stderr.trim()}`);
    // Nothing of the refused rows: every row there is one written before the change, with its values then.
    // A first load killed part way (a table's `inside`) committed some of them; otherwise all.
    // An API's read meeting the change part way committed the pages before it.
    await compare(cell, destination, pipeline, before, before, BEFORE, { subset: cell.when === 'inside' && (source.family === 'table' || source.family === 'api'), readBefore });
    return { status: 'refused' };
  }
  if (last.code !== 0) throw new OracleError(`final run: exit ${last.code}: ${last.stderr.trim().split('\n').slice(-3).join(' | ')}`);
  await compare(cell, destination, pipeline, before, after, BEFORE + AFTER, { subset: false, readBefore });
  await destination.instance.check(pipeline, STREAM, false);
  return { status: 'passed', ...(notFired ? { notFired } : {}) };
}

/**
 * The destination's rows against the model: rows 1…BEFORE with the columns before the change, the rest with the
 * columns after it (`readBefore`: how many rows were read before the change). A dropped column keeps its old values (NULL after) unless the table was rebuilt; a new one is
 * NULL in older rows; a renamed one is found under either name, whatever the case where the destination folds it.
 */
async function compare(cell: DriftCell, destination: DriftDestination, pipeline: string, before: readonly DriftColumn[], after: readonly DriftColumn[], count: number, o: { subset: boolean; readBefore: number }): Promise<void> {
  const c = changeOf(cell.change);
  const rebuilt = cell.write === 'full' && after !== before;
  const names = new Map<string, DriftColumn>();
  for (const col of [...before, ...after]) names.set(col.name.toLowerCase(), after.find((a) => a.name.toLowerCase() === col.name.toLowerCase()) ?? col);
  if (rebuilt && c.drop) names.delete(c.column);
  const present = await destination.columns(pipeline, STREAM);
  // A refused first load (a rebuild killed before its swap) left no table.
  if (o.subset && present.length === 0) return;
  const at = new Map<string, string>();
  /** Second spellings of a column, where a rebuild from records of both keeps them apart (Postgres): each row has one. */
  const twins = new Map<string, string[]>();
  for (const key of names.keys()) {
    const found = present.filter((p) => p.toLowerCase() === key);
    if (found.length === 0) {
      // A refused new column was never added.
      if (after === before && !BASE_COLUMNS.some((b) => b.name.toLowerCase() === key)) continue;
      throw new OracleError(`column ${key} is missing from the destination (it has ${present.join(', ')})`);
    }
    if (found.length > 1 && !(rebuilt && c.rename !== undefined && cell.destination === 'postgres')) throw new OracleError(`column ${key} is in the destination ${found.length} times: ${found.join(', ')}`);
    at.set(key, found[0]!);
    if (found.length > 1) twins.set(key, found.slice(1));
  }
  const got = await destination.rows(pipeline, STREAM, [...at.values(), ...[...twins.values()].flat()]);
  const byId = new Map<string, Record<string, unknown>>();
  for (const r of got) {
    const id = String(r[at.get('id')!]);
    if (byId.has(id)) throw new OracleError(`id ${id} is in the destination twice`);
    byId.set(id, r);
  }
  if (o.subset ? byId.size > count : byId.size !== count) throw new OracleError(`the destination holds ${byId.size} rows, expected ${o.subset ? `at most ${count}` : count}`);
  for (let i = 1; i <= count; i += 1) {
    const row = byId.get(String(i));
    if (row === undefined) {
      if (o.subset) continue;
      throw new OracleError(`row ${i} is missing`);
    }
    const newer = i > BEFORE;
    const expected: Canonical = newer ? rowOf(after, cell.change, i) : rowOf(before, undefined, i);
    // A row written before the change but read after it comes as the source holds it then: without a dropped column.
    if (!newer && i > o.readBefore && c.drop) expected[c.column] = null;
    for (const [key, column] of names) {
      if (!at.has(key)) continue;
      const model = Object.entries(expected).find(([n]) => n.toLowerCase() === key);
      const want = model === undefined ? null : model[1];
      const spellings = [at.get(key)!, ...(twins.get(key) ?? [])].map((n) => row[n]).filter((v) => v !== null && v !== undefined);
      if (spellings.length > 1) throw new OracleError(`row ${i} column ${key}: a value under ${spellings.length} spellings`);
      const have = canonical(KIND[column.type], spellings[0] ?? null);
      const wanted = want === null ? null : canonical(KIND[column.type], want);
      if (have !== wanted) throw new OracleError(`row ${i} column ${key}: ${JSON.stringify(have)}, expected ${JSON.stringify(wanted)}`);
    }
  }
}
