/**
 * The destination and state-store conformance suites on a lake: a local directory and a local S3-compatible
 * server (s3rver, started here). Merge does not apply to files (declared skip).
 */
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { FilesDestination } from '../../../src/destinations/files/files-destination.js';
import { silentLogger } from '../../../src/core/logger.js';
import { createStateStore } from '../../../src/registry/index.js';
import { destinationConformance } from '../../conformance/destination-suite.js';
import { stateStoreConformance } from '../../conformance/state-store-suite.js';
import { tempDir } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';

let s3: LocalS3;
beforeAll(async () => {
  s3 = await startS3();
}, 30_000);
afterAll(async () => s3?.stop());

let n = 0;
const SKIP = { merge: 'a lake cannot upsert in place; the files destination rejects write: merge at validation' };

destinationConformance(
  'files (directory)',
  async () => {
    const { dir, cleanup } = await tempDir();
    return { open: () => FilesDestination.open({ location: join(dir, 'lake'), logger: silentLogger }), text: (c) => `CAST("${c}" AS VARCHAR)`, cleanup };
  },
  { skip: SKIP },
);

destinationConformance(
  'files (s3rver)',
  async () => {
    n += 1;
    const location = `s3://${s3.bucket}/conformance-${n}`;
    return {
      open: () =>
        FilesDestination.open({
          location,
          endpoint: s3.endpoint,
          credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
          logger: silentLogger,
        }),
      text: (c) => `CAST("${c}" AS VARCHAR)`,
      cleanup: async () => undefined,
    };
  },
  { skip: SKIP },
);

stateStoreConformance('bucket (directory)', async () => {
  const { dir, cleanup } = await tempDir();
  return { open: () => createStateStore({ type: 'bucket', location: join(dir, 'bucket') }), cleanup };
});

// s3rver ignores conditional writes, so the lease lives in a file store (`lock:`), as tidemark asks there.
stateStoreConformance('bucket (s3rver, lock: file)', async () => {
  const { dir, cleanup } = await tempDir();
  n += 1;
  const location = `s3://${s3.bucket}/store-${n}`;
  return {
    open: () =>
      createStateStore({
        type: 'bucket',
        location,
        endpoint: s3.endpoint,
        credentials: { access_key_id: s3.accessKeyId, secret_access_key: s3.secretAccessKey },
        lock: { type: 'file', path: join(dir, 'locks') },
      }),
    cleanup,
  };
});
