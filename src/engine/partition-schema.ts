/**
 * The schema step of one partition of a files stream: its files' columns now against the schema the table was
 * committed with (each month of a file drop may differ: INT32 → DOUBLE, DECIMAL(10,2) → DECIMAL(12,4), TIMESTAMP →
 * TIMESTAMP_NS), under the stream's `schema_changes` policy. A widening converts the column in the partition's own
 * commit; anything else refuses this partition, naming its files, while the partitions after it still load.
 */
import type { Destination } from '../core/connector.js';
import { SourceError } from '../core/errors.js';
import { DEFAULT_SCHEMA_POLICY, type SchemaPolicy } from '../core/schema-diff.js';
import type { Column, CommittedSchema, StreamSchema } from '../core/types.js';
import { evaluateSchema, type SchemaStep } from './schema-check.js';

export function partitionSchemaStep(
  ctx: { readonly pipeline: string; readonly destination: Pick<Destination, 'widens' | 'capabilities'> },
  stream: { readonly name: string; readonly schemaChanges?: SchemaPolicy },
  committed: CommittedSchema | undefined,
  now: StreamSchema,
): SchemaStep {
  // Where the destination matches names whatever their case, a file that spells a committed column otherwise
  // (Airport_fee → airport_fee) sends that column: compared, and committed, under the name the table has.
  const columns = ctx.destination.capabilities.foldsCase === true && committed !== undefined ? now.columns.map((c) => asCommitted(c, committed)) : now.columns;
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

function asCommitted(column: Column, committed: CommittedSchema): Column {
  if (committed.columns.some((c) => c.name === column.name)) return column;
  const lower = column.name.toLowerCase();
  const match = committed.columns.find((c) => c.name.toLowerCase() === lower);
  return match === undefined ? column : { ...column, name: match.name };
}
