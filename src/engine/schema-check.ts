/**
 * What a run does with the differences between a stream's committed schema and its source's schema now: under the
 * stream's `schema_changes` policy, each change is applied in the same commit as the rows that need it (a new
 * column added, a widened column converted), reported (a dropped column, a left-out new one), or stops the stream
 * before anything of it is written, naming the column, the old and new type, and the ways out.
 */
import type { Batch, ColumnWidening, Destination, OpenedRead } from '../core/connector.js';
import { SourceError } from '../core/errors.js';
import { DEFAULT_SCHEMA_POLICY, DEFAULT_TIME_PRECISION, describeChange, diffSchemas, nextCommittedSchema, timePrecision, typeName, type SchemaChange, type SchemaPolicy, type SourceShape } from '../core/schema-diff.js';
import type { Column, CommittedSchema, PipelineState, Row, StreamSchema, StreamState } from '../core/types.js';

/** What a run applies to one stream's schema. */
export interface SchemaStep {
  /** Every difference found (also the ones applied silently, such as a new column). */
  readonly changes: readonly SchemaChange[];
  /** Destination columns to convert to a wider type before rows land (`TableTarget.widen`). */
  readonly widen: readonly ColumnWidening[];
  /** New source columns the policy leaves out of the destination. */
  readonly leftOut: ReadonlySet<string>;
  /** The schema the run's commits record. */
  readonly committed: CommittedSchema;
  /** One line per change the user should hear of (dropped or left-out columns, a new key), for the run's warnings. */
  readonly notices: readonly string[];
}

export interface SchemaInput {
  readonly pipeline: string;
  readonly stream: string;
  /** The schema the table was committed with; undefined on a first load (or a state written before schemas were kept). */
  readonly committed: CommittedSchema | undefined;
  readonly now: SourceShape;
  readonly policy: SchemaPolicy;
  /**
   * The run writes a new table from scratch (`--full`, `strategy: full`): any change is fine under `evolve`, since
   * nothing of the old table is kept. `requested`: the user asked for the rebuild (`--full`), which also lifts `freeze`.
   */
  readonly rebuild?: { readonly requested: boolean };
  readonly destination: Pick<Destination, 'widens'>;
}

/** The schema step, or why the stream must stop (one line, without the pipeline/stream prefix errors add). */
export type SchemaVerdict = { readonly step: SchemaStep; readonly stop?: undefined } | { readonly stop: string; readonly changes: readonly SchemaChange[] };

/** Applies the policy to the changes; never throws (see `checkSchema`). */
export function evaluateSchema(input: SchemaInput): SchemaVerdict {
  const { committed, now, policy, rebuild } = input;
  if (committed === undefined || rebuild !== undefined) {
    const changes = committed === undefined ? [] : diffSchemas(committed, now);
    const chosen = rebuild?.requested !== true;
    if (chosen && policy.mode === 'freeze' && changes.length > 0) return refuse(input, changes, changes, 'freeze');
    const leftOut = new Set(chosen && policy.newColumns === 'ignore' ? changes.flatMap((c) => (c.kind === 'added' ? [c.column.name] : [])) : []);
    const precise = now.columns.filter((c) => !leftOut.has(c.name) && timePrecision(c.type) > DEFAULT_TIME_PRECISION);
    if (precise.length > 0) return { stop: `${precise.map((c) => `column ${c.name} is ${typeName(c.type)}`).join('; ')}, finer than the microseconds the destination keeps${waysOut(input, false)}`, changes };
    return { step: { changes, widen: [], leftOut, committed: nextCommittedSchema(undefined, now, leftOut), notices: noticesOf(changes, leftOut) } };
  }
  const changes = diffSchemas(committed, now);
  if (changes.length === 0) return { step: { changes, widen: [], leftOut: new Set(), committed: nextCommittedSchema(committed, now), notices: [] } };
  const twins = caseTwins(committed, now);
  if (twins.length > 0) return { stop: `${twins.join('; ')}${waysOut(input, false)}`, changes };
  if (policy.mode === 'freeze') return refuse(input, changes, changes, 'freeze');
  const blocking: SchemaChange[] = [];
  const widen: ColumnWidening[] = [];
  const leftOut = new Set<string>();
  for (const change of changes) {
    if (change.kind === 'type') {
      const holds = change.change === 'widened' && input.destination.widens?.(change.from, change.to) === true;
      if (holds) widen.push({ column: change.column, from: change.from, to: change.to });
      else blocking.push(change);
    } else if (change.kind === 'renamed') {
      blocking.push(change);
    } else if (change.kind === 'added' && policy.newColumns === 'ignore') {
      leftOut.add(change.column.name);
    } else if (change.kind === 'added' && timePrecision(change.column.type) > DEFAULT_TIME_PRECISION) {
      blocking.push(change);
    } else if (change.kind === 'dropped' && policy.droppedColumns === 'stop') {
      blocking.push(change);
    }
  }
  if (blocking.length > 0) return refuse(input, changes, blocking, 'evolve');
  return { step: { changes, widen, leftOut, committed: nextCommittedSchema(committed, now, leftOut), notices: noticesOf(changes, leftOut) } };
}

/** `evaluateSchema`, throwing the stop as a SourceError naming pipeline, stream and phase `schema`. */
export function checkSchema(input: SchemaInput): SchemaStep {
  const verdict = evaluateSchema(input);
  if (verdict.stop !== undefined) throw new SourceError(verdict.stop, { context: { pipeline: input.pipeline, stream: input.stream, phase: 'schema' } });
  return verdict.step;
}

/**
 * New source columns spelling a column the table has, and the source still sends, otherwise only in case (an API
 * whose newer records say `Note` where older ones said `note`): one column or two? Where the destination folds case
 * they were merged before this check (`withFoldedCase`); here (Postgres) they would split one field's values over two
 * columns, so the stream stops naming both.
 */
function caseTwins(committed: CommittedSchema, now: SourceShape): string[] {
  const held = new Set(committed.columns.map((c) => c.name));
  return now.columns.flatMap((c) => {
    if (held.has(c.name)) return [];
    const twin = now.columns.find((o) => o !== c && held.has(o.name) && o.name.toLowerCase() === c.name.toLowerCase());
    return twin === undefined ? [] : [`column ${c.name} differs only in case from column ${twin.name}, which the source sends too and this destination keeps apart: its values would split over two columns`];
  });
}

/**
 * Changes worth a warning: the ones that leave the destination unlike the source (a dropped column kept NULL, a new
 * one left out) or change how rows are matched.
 */
function noticesOf(changes: readonly SchemaChange[], leftOut: ReadonlySet<string>): string[] {
  return changes.flatMap((c) => {
    if (c.kind === 'added') return leftOut.has(c.column.name) ? [`${describeChange(c)} left out (schema_changes new_columns: ignore)`] : [];
    return c.kind === 'dropped' || c.kind === 'key' || c.kind === 'renamed' ? [describeChange(c)] : [];
  });
}

function refuse(input: SchemaInput, all: readonly SchemaChange[], blocking: readonly SchemaChange[], mode: 'evolve' | 'freeze'): SchemaVerdict {
  const what = blocking.map((c) => reason(c, input.policy, mode)).join('; ');
  return { stop: `${what}${waysOut(input, blocking.some((c) => c.kind === 'dropped'))}`, changes: all };
}

function reason(change: SchemaChange, policy: SchemaPolicy, mode: 'evolve' | 'freeze'): string {
  if (mode === 'freeze') return `${describeChange(change)} (schema_changes: freeze)`;
  switch (change.kind) {
    case 'type':
      return change.change === 'widened'
        ? `column ${change.column} changed ${typeName(change.from)} → ${typeName(change.to)}, which this destination cannot convert in place keeping every value`
        : `column ${change.column} changed ${typeName(change.from)} → ${typeName(change.to)} (${change.change}), which would not hold every value exactly`;
    case 'renamed':
      return `column ${change.from.name} now comes as ${change.to.name} (only the case differs), which would load as a second column (a files stream's rename: {${change.to.name}: ${change.from.name}} says it is that column)`;
    case 'dropped':
      return `${describeChange(change)} (schema_changes dropped_columns: ${policy.droppedColumns})`;
    case 'added':
      return `new column ${change.column.name} is ${typeName(change.column.type)}, finer than the microseconds the destination keeps`;
    default:
      return describeChange(change);
  }
}

function waysOut(input: SchemaInput, dropped: boolean): string {
  const options = [`tidemark run ${input.pipeline} --full --stream ${input.stream} rebuilds the table from the source as it is now`];
  if (dropped) options.push('schema_changes: { dropped_columns: keep } keeps the column, NULL from now on');
  else if (input.policy.mode === 'freeze') options.push('schema_changes: evolve applies changes that keep every value exact');
  else options.push('or change the source column back');
  return `; nothing of this stream was loaded. Ways out: ${options.join('; ')}`;
}

/** The read without the columns the policy leaves out: its rows lose those values, and it has no bulk form. */
export function withoutColumns(read: OpenedRead, leftOut: ReadonlySet<string>): OpenedRead {
  if (leftOut.size === 0) return read;
  const keep = read.schema.columns.flatMap((c, i) => (leftOut.has(c.name) ? [] : [i]));
  const schema: StreamSchema = { ...read.schema, columns: keep.map((i) => read.schema.columns[i]!) };
  return withRowsMapped(read, schema, (row) => keep.map((i) => row[i] ?? null));
}

/** The read with another schema and each row mapped; the bulk path is dropped, as it would bypass the mapping. */
function withRowsMapped(read: OpenedRead, schema: StreamSchema, map: (row: Row) => Row): OpenedRead {
  async function* batches(): AsyncIterable<Batch> {
    for await (const batch of read.batches()) yield { ...batch, rows: batch.rows.map(map) };
  }
  // A proxy, not a copy: a source may compute members such as `safeMark` while its rows are read.
  return new Proxy(read, {
    get(target, property) {
      if (property === 'schema') return schema;
      if (property === 'bulk') return undefined;
      if (property === 'batches') return batches;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * Where the destination matches names whatever their case, source columns spelling one name in several cases (an
 * API's `note` in older records, `Note` in newer ones) are one column: the first spelling is kept, and each row's
 * value is the one spelling it has. A record with different values under both stops the read naming them.
 */
export function withFoldedCase(read: OpenedRead, destination: Pick<Destination, 'capabilities'>, context: { readonly pipeline: string; readonly stream: string }): OpenedRead {
  if (destination.capabilities.foldsCase !== true) return read;
  const columns = read.schema.columns;
  const first = new Map<string, number>();
  const into = columns.map((c, i) => {
    const key = c.name.toLowerCase();
    if (!first.has(key)) first.set(key, i);
    return first.get(key)!;
  });
  if (into.every((target, i) => target === i)) return read;
  const keep = columns.flatMap((_, i) => (into[i] === i ? [i] : []));
  const schema: StreamSchema = { ...read.schema, columns: keep.map((i) => columns[i]!) };
  const merge = (row: Row): Row => {
    const out = [...row];
    into.forEach((target, i) => {
      if (target === i || row[i] === null || row[i] === undefined) return;
      if (out[target] !== null && out[target] !== undefined && String(out[target]) !== String(row[i])) {
        throw new SourceError(`a record has ${columns[target]!.name} ${JSON.stringify(String(out[target]))} and ${columns[i]!.name} ${JSON.stringify(String(row[i]))}, one column in this destination (names differing only in case are one column there)`, {
          context: { ...context, phase: 'extract' },
        });
      }
      out[target] = row[i]!;
    });
    return keep.map((i) => out[i] ?? null);
  };
  return withRowsMapped(read, schema, merge);
}

/**
 * A build under way that cannot take the source's columns is started again, rather than the stream stopped, when
 * the user asked for a rebuild (`--full`) or this run started it (its read met a grown schema part way): nothing of
 * it is live yet, and a new build takes the source's columns as they are.
 */
export function restartsBuild(plan: { readonly generation?: string; readonly freshBuild: boolean }, run: { readonly full: boolean; readonly runId: string }): boolean {
  return plan.generation !== undefined && !plan.freshBuild && (run.full || plan.generation === run.runId);
}

/** The state without the stream's build under way (and its resume position): a plan from it starts a new build. */
export function withoutBuild(state: PipelineState, stream: string): PipelineState {
  const prior = state.streams[stream];
  if (prior?.build === undefined) return state;
  const { build: _build, resume: _resume, ...rest } = prior;
  return { ...state, streams: { ...state.streams, [stream]: rest } };
}

/** Who asks: the run (or plan) of a pipeline, and whether it rebuilds on request (`--full`). */
export interface SchemaAsker {
  readonly pipeline: string;
  readonly full: boolean;
  readonly destination: Pick<Destination, 'widens' | 'capabilities'>;
}

/**
 * Where the destination matches names whatever their case, a source column that spells a committed column otherwise
 * (`Airport_fee` → `airport_fee`, `note` → `Note`) is that column: compared, and committed, under the name the table
 * has. Elsewhere the names stay as they come (a case-only rename is then reported, and refused).
 */
export function inCommittedCase(destination: Pick<Destination, 'capabilities'>, columns: readonly Column[], committed: CommittedSchema | undefined): readonly Column[] {
  if (destination.capabilities.foldsCase !== true || committed === undefined) return columns;
  return columns.map((column) => {
    if (committed.columns.some((c) => c.name === column.name)) return column;
    const lower = column.name.toLowerCase();
    const match = committed.columns.find((c) => c.name.toLowerCase() === lower);
    return match === undefined ? column : { ...column, name: match.name };
  });
}

/**
 * The comparison a stream load makes: with the build table's schema when a build resumes, else the live table's; a
 * build started afresh writes a new table.
 */
export function schemaInput(
  ctx: SchemaAsker,
  stream: { readonly name: string; readonly schemaChanges?: SchemaPolicy },
  plan: { readonly generation?: string; readonly freshBuild: boolean },
  prior: StreamState | undefined,
  now: StreamSchema,
): SchemaInput {
  const resumedBuild = plan.generation !== undefined && !plan.freshBuild;
  const committed = resumedBuild ? prior?.build?.schema : prior?.schema;
  return {
    pipeline: ctx.pipeline,
    stream: stream.name,
    committed,
    now: { ...now, columns: inCommittedCase(ctx.destination, now.columns, committed) },
    policy: stream.schemaChanges ?? DEFAULT_SCHEMA_POLICY,
    ...(plan.freshBuild ? { rebuild: { requested: ctx.full } } : {}),
    destination: ctx.destination,
  };
}

/** The schema step of a stream load (throws when the stream must stop); its notices go to the run's warnings. */
export function streamSchemaStep(
  ctx: SchemaAsker & { readonly onWarning?: (stream: string, message: string) => void },
  stream: { readonly name: string; readonly schemaChanges?: SchemaPolicy },
  plan: { readonly generation?: string; readonly freshBuild: boolean },
  prior: StreamState | undefined,
  now: StreamSchema,
): SchemaStep {
  const step = checkSchema(schemaInput(ctx, stream, plan, prior, now));
  for (const notice of step.notices) ctx.onWarning?.(stream.name, `schema change: ${notice}`);
  return step;
}
