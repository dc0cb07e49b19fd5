/**
 * The pipeline document as users write it (DESIGN.md §6), validated with zod. Connector sections are unions of
 * each connector's own schema, so `tidemark schema` prints one JSON Schema of everything accepted.
 */
import { z } from 'zod';

/** Names that become file names, table names and lock directories: no separators, no `..`, no NUL. */
export const NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const name = z
  .string()
  .regex(NAME_RE, 'letters, digits, "_", "-" and "." only, not starting with "." or "-"')
  .refine((s) => !s.includes('..'), 'must not contain ".."');

export const sqliteSourceSchema = z.object({ type: z.literal('sqlite'), path: z.string().min(1) }).strict();

export const duckdbDestinationSchema = z
  .object({
    type: z.literal('duckdb'),
    path: z.string().min(1).default('./tidemark.duckdb'),
    schema: z.string().min(1).optional(),
  })
  .strict();

export const sqliteDestinationSchema = z.object({ type: z.literal('sqlite'), path: z.string().min(1) }).strict();

export const sourceSchema = z.discriminatedUnion('type', [sqliteSourceSchema]);
export const destinationSchema = z.discriminatedUnion('type', [duckdbDestinationSchema, sqliteDestinationSchema]);

export const streamSchema = z
  .object({
    name: name.optional(),
    table: z.string().min(1).optional(),
    query: z.string().min(1).optional(),
    primary_key: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]).optional(),
    cursor: z.string().min(1).optional(),
    strategy: z.enum(['incremental', 'full']).optional(),
    write: z.enum(['append', 'merge', 'replace']).optional(),
    lookback: z.string().optional(),
    on_null_cursor: z.enum(['error', 'include', 'exclude']).optional(),
    checkpoint_rows: z.number().int().positive().optional(),
    batch_rows: z.number().int().positive().optional(),
  })
  .strict();

export const pipelineSchema = z
  .object({
    name,
    source: sourceSchema,
    streams: z.array(streamSchema).min(1),
    destination: destinationSchema.default({ type: 'duckdb', path: './tidemark.duckdb' }),
    state: z.literal('destination').default('destination'),
    lock_ttl: z.string().optional(),
    schedule: z.string().optional(),
  })
  .strict();

export type PipelineDocument = z.infer<typeof pipelineSchema>;
export type StreamDocument = z.infer<typeof streamSchema>;
export type SourceConfig = z.infer<typeof sourceSchema>;
export type DestinationConfig = z.infer<typeof destinationSchema>;

export function pipelineJsonSchema(): unknown {
  return z.toJSONSchema(pipelineSchema, { io: 'input' });
}
