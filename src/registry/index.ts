/**
 * Connector name → lazy import. The one place that knows every connector; a pipeline that reads SQLite into
 * DuckDB never loads pg or mysql2.
 */
import { join } from 'node:path';
import type { Destination, LeaseProvider, Source } from '../core/connector.js';
import type { DestinationConfig, SourceConfig } from '../config/schema.js';
import { FileLeaseProvider } from '../state/file/file-lease.js';

export async function openSource(config: SourceConfig): Promise<Source> {
  switch (config.type) {
    case 'sqlite': {
      const { SqliteSource } = await import('../sources/sqlite/sqlite-source.js');
      return new SqliteSource({ path: config.path });
    }
  }
}

export async function openDestination(config: DestinationConfig): Promise<Destination> {
  switch (config.type) {
    case 'duckdb': {
      const { DuckDbDestination } = await import('../destinations/duckdb/duckdb-destination.js');
      return DuckDbDestination.open({ path: config.path, ...(config.schema !== undefined ? { schema: config.schema } : {}) });
    }
    case 'sqlite': {
      const { SqliteDestination } = await import('../destinations/sqlite/sqlite-destination.js');
      return SqliteDestination.open({ path: config.path });
    }
  }
}

/**
 * Leases for file-backed destinations live in a directory beside the database file, so a second run can report
 * who holds the pipeline even while the database file itself is locked by that holder.
 */
export function leaseProviderFor(config: DestinationConfig): LeaseProvider {
  return new FileLeaseProvider(`${config.path}.locks`);
}

export function leaseDirectory(config: DestinationConfig): string {
  return join(`${config.path}.locks`);
}
