/**
 * A connector stream's columns come from a catalog or a SCHEMA message; one that gives none cannot become a table.
 * Refused before the destination is asked to create it, naming where the columns were to come from.
 */
import { SourceError } from '../core/errors.js';
import type { StreamSchema } from '../core/types.js';

export function withColumns(schema: StreamSchema, origin: string): StreamSchema {
  if (schema.columns.length > 0) return schema;
  throw new SourceError(`stream ${schema.name}: ${origin} has an empty schema (no properties), so the stream has no columns to load; give the stream's fields in its schema`, {
    context: { stream: schema.name, phase: 'discover' },
  });
}
