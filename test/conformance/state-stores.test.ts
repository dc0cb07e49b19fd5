import { join } from 'node:path';
import { createStateStore } from '../../src/registry/index.js';
import { tempDir } from '../helpers/fs.js';
import { createTestDatabase } from './postgres-fixture.js';
import { stateStoreConformance } from './state-store-suite.js';

stateStoreConformance('file', async () => {
  const { dir, cleanup } = await tempDir();
  return { open: () => createStateStore({ type: 'file', path: join(dir, 'state') }), cleanup };
});

stateStoreConformance('sqlite', async () => {
  const { dir, cleanup } = await tempDir();
  return { open: () => createStateStore({ type: 'sqlite', path: join(dir, 'state.sqlite') }), cleanup };
});

stateStoreConformance('postgres', async () => {
  const db = await createTestDatabase('tm_store');
  return { open: () => createStateStore({ type: 'postgres', url: db.url, schema: 'tm state' }), cleanup: () => db.drop() };
});
