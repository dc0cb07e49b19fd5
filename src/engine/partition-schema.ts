/**
 * The schema step of one partition of a files stream: its files' columns now against the schema the table was
 * committed with (each month of a file drop may differ: INT32 → DOUBLE, DECIMAL(10,2) → DECIMAL(12,4), TIMESTAMP →
 * TIMESTAMP_NS), under the stream's `schema_changes` policy. A widening converts the column in the partition's own
 * commit; anything else refuses this partition, naming its files, while the partitions after it still load.
 */
import type { Batch, ColumnBatch, Destination, OpenedPartition } from '../core/connector.js';
import { SourceError } from '../core/errors.js';
import { DEFAULT_SCHEMA_POLICY, type SchemaPolicy } from '../core/schema-diff.js';
import type { CommittedSchema, StreamSchema } from '../core/types.js';
import { quoteIdent } from '../shared/sql.js';
import { evaluateSchema, inCommittedCase, type SchemaStep } from './schema-check.js';

export function partitionSchemaStep(
  ctx: { readonly pipeline: string; readonly destination: Pick<Destination, 'widens' | 'capabilities'> },
  stream: { readonly name: string; readonly schemaChanges?: SchemaPolicy },
  committed: CommittedSchema | undefined,
  now: StreamSchema,
): SchemaStep {
  const columns = inCommittedCase(ctx.destination, now.columns, committed);
  const verdict = evaluateSchema({
    pipeline: ctx.pipeline,
    stream: stream.name,
    committed,
    now: { columns, primaryKey: now.primaryKey },
    policy: stream.schemaChanges ?? DEFAULT_SCHEMA_POLICY,
    destination: ctx.destination,
  });
  if (verdict.stop === undefined) return verdict.step;
  // The refusal is this partition's: the others load (see partition-load.ts).
  throw new SourceError(verdict.stop.replace('nothing of this stream was loaded', 'nothing of this partition was loaded'), {
    context: { pipeline: ctx.pipeline, stream: stream.name, phase: 'schema' },
  });
}

/**
 * The partition without the columns the policy leaves out (`new_columns: ignore`): its schema, rows, column batches
 * and native scan all lose them, so the table is neither given the column nor its values.
 */
export function partitionWithout(opened: OpenedPartition, leftOut: ReadonlySet<string>): OpenedPartition {
  if (leftOut.size === 0) return opened;
  const keep = opened.schema.columns.flatMap((c, i) => (leftOut.has(c.name) ? [] : [i]));
  const columns = keep.map((i) => opened.schema.columns[i]!);
  async function* batches(): AsyncIterable<Batch> {
    for await (const batch of opened.batches()) yield { ...batch, rows: batch.rows.map((row) => keep.map((i) => row[i] ?? null)) };
  }
  const columnBatches = opened.columnBatches?.bind(opened);
  async function* keptColumnBatches(): AsyncIterable<ColumnBatch> {
    for await (const batch of columnBatches!()) yield { rowCount: batch.rowCount, columns: keep.map((i) => batch.columns[i]!) };
  }
  // The scan's columns are named as the schema's: the kept ones are selected by name, in schema order.
  const scan = opened.scan && { ...opened.scan, sql: `SELECT ${columns.map((c) => quoteIdent(c.name)).join(', ')} FROM (${opened.scan.sql})` };
  return {
    ...opened,
    schema: { ...opened.schema, columns },
    ...(scan ? { scan } : {}),
    batches,
    ...(columnBatches ? { columnBatches: keptColumnBatches } : {}),
    explain: (error) => opened.explain(error),
    close: () => opened.close(),
  };
}
