import { join } from 'node:path';
import { DuckDbDestination } from '../../src/destinations/duckdb/duckdb-destination.js';
import { PostgresDestination } from '../../src/destinations/postgres/postgres-destination.js';
import { SqliteDestination } from '../../src/destinations/sqlite/sqlite-destination.js';
import { tempDir } from '../helpers/fs.js';
import { destinationConformance } from './destination-suite.js';
import { createTestDatabase } from './postgres-fixture.js';

destinationConformance('duckdb', async () => {
  const { dir, cleanup } = await tempDir();
  return { open: () => DuckDbDestination.open({ path: join(dir, 'w.duckdb') }), text: (c) => `CAST("${c}" AS VARCHAR)`, cleanup };
});

destinationConformance('sqlite', async () => {
  const { dir, cleanup } = await tempDir();
  return { open: () => SqliteDestination.open({ path: join(dir, 'w.sqlite') }), text: (c) => `CAST("${c}" AS TEXT)`, cleanup };
});

destinationConformance('postgres', async () => {
  const db = await createTestDatabase('tm_dest');
  return {
    // Unqualified names in the suite's queries resolve through the search_path to the destination's schema.
    open: () => PostgresDestination.open({ url: db.url, schema: 'warehouse' }),
    text: (c) => `"${c}"::text`,
    cleanup: () => db.drop(),
  };
});
