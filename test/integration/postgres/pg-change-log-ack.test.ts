/**
 * Acknowledging a position with no stream open (a run's last commit, after its read ended or was stopped) while a
 * walsender still holds the slot: under load the walsender of the run's own stream can stay busy decoding for
 * seconds after its client left. The run holds the pipeline's lease, so it claims the slot and advances it.
 */
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChangeLogRequest } from '../../../src/core/change-log.js';
import { slotName } from '../../../src/sources/postgres/pg-change-log.js';
import { PostgresSource } from '../../../src/sources/postgres/postgres-source.js';
import { parsePgLsn, positionLsn } from '../../../src/sources/postgres/pgoutput.js';
import { createCdcDb, uniquePipeline } from '../../e2e/cdc/pg-cdc.js';
import type { PgTestDb } from './pg-db.js';

let db: PgTestDb;
beforeAll(async () => {
  db = await createCdcDb('cdcack');
});
afterAll(async () => db?.drop());

describe('postgres change log acknowledge', () => {
  it('advances the slot although another walsender is still on it', async () => {
    await db.sql(`CREATE TABLE t (id int PRIMARY KEY)`);
    const source = await PostgresSource.connect({ url: db.url, maxSkewMs: 0 });
    const log = source.changeLog!;
    const request: ChangeLogRequest = { pipeline: uniquePipeline('ack'), tables: [{ stream: 't', table: 'public.t', primaryKey: ['id'] }] };
    await log.setup(request, { dryRun: false });
    const snapshot = await log.snapshot(request, { initial: true });
    await snapshot.close();
    const slot = slotName(request.pipeline);
    await db.sql(`INSERT INTO t SELECT generate_series(1, 100)`);
    const position = await log.currentPosition();
    // A walsender on the slot that is not this source's (pg_recvlogical streaming it to nowhere).
    const holder = spawn('pg_recvlogical', ['-d', db.url, '-S', slot, '--start', '-o', 'proto_version=1', '-o', `publication_names=${slot}`, '-f', '/dev/null'], { stdio: 'ignore' });
    try {
      for (let i = 0; !(await log.status(request)).active; i += 1) {
        if (i > 100) throw new Error('pg_recvlogical never took the slot');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await log.acknowledge(request, position);
      const after = await log.status(request);
      expect(parsePgLsn(after.confirmed!)).toBeGreaterThanOrEqual(positionLsn(position));
    } finally {
      holder.kill('SIGKILL');
      await source.close();
    }
  }, 30_000);

  // A SIGTERM can land while the read is still opening its stream, before it listens for the stop: it must end all
  // the same, not follow the slot until the process is killed.
  it('a follow read whose stop came before it started ends at once', async () => {
    await db.sql(`CREATE TABLE f (id int PRIMARY KEY)`);
    const source = await PostgresSource.connect({ url: db.url, maxSkewMs: 0 });
    const log = source.changeLog!;
    const request: ChangeLogRequest = { pipeline: uniquePipeline('stop'), tables: [{ stream: 'f', table: 'public.f', primaryKey: ['id'] }] };
    try {
      await log.setup(request, { dryRun: false });
      const snapshot = await log.snapshot(request, { initial: true });
      await snapshot.close();
      const stop = new AbortController();
      stop.abort(new Error('SIGTERM'));
      const read = (async () => {
        let n = 0;
        for await (const _ of log.read(request, { after: snapshot.position, batchChanges: 100, signal: stop.signal })) n += 1;
        return n;
      })();
      const late = new Promise<'still reading'>((resolve) => setTimeout(() => resolve('still reading'), 10_000).unref());
      await expect(Promise.race([read, late])).resolves.toBe(0);
    } finally {
      await source.close();
    }
  }, 30_000);
});
