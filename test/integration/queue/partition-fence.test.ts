/**
 * The commit rule of partition jobs, at the destination seam (real Postgres): a partition commit is fenced by its
 * own lease's token, checks (never records) the pipeline token, writes no pipeline state, and replaces a ledger row
 * only if it still holds what the load planned against. Also: the lease name is safe, and partition jobs hold the
 * pipeline lease shared, excluding an exclusive holder and vice versa.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { partitionLeaseName, type CommitRequest, type Fence, type LedgerMark } from '../../../src/core/connector.js';
import { ConflictError } from '../../../src/core/errors.js';
import type { LedgerEntry, StreamSchema } from '../../../src/core/types.js';
import { PostgresDestination } from '../../../src/destinations/postgres/postgres-destination.js';
import { PostgresLeaseProvider } from '../../../src/state/postgres/postgres-lease.js';
import { createTestDatabase, type TestDatabase } from '../../conformance/postgres-fixture.js';

const SCHEMA: StreamSchema = {
  name: 'trips',
  columns: [
    { name: 'id', type: { kind: 'int64' }, nullable: false },
    { name: 'month', type: { kind: 'text' }, nullable: false },
  ],
  primaryKey: ['id'],
};

let db: TestDatabase;
let dest: PostgresDestination;
beforeAll(async () => {
  db = await createTestDatabase('tm_pfence');
  dest = await PostgresDestination.open({ url: db.url });
});
afterAll(async () => {
  await dest.close();
  await db.drop();
});

let runs = 0;
async function load(partition: string, fence: Fence, expect: LedgerMark | null, rows = 3): Promise<LedgerEntry> {
  const runId = `run-${String((runs += 1)).padStart(3, '0')}`;
  const txn = await dest.begin({
    pipeline: 'p',
    runId,
    target: { schema: SCHEMA, write: 'append', replacePartition: { column: 'month', value: partition } },
    fence,
  });
  await txn.write(Array.from({ length: rows }, (_, i) => [BigInt(i + 1), partition]));
  const entry: LedgerEntry = { pipeline: 'p', stream: 'trips', partition, files: [], rows, bytes: 0, status: 'loaded', runId, loadedAt: new Date().toISOString() };
  const request: CommitRequest = {
    // A partition commit ignores the state; an exclusive one is the pipeline's first state version.
    state: { pipeline: 'p', version: fence.partition ? 0 : 1, streams: {} },
    run: {
      runId, pipeline: 'p', stream: 'trips', startedAt: entry.loadedAt, finishedAt: entry.loadedAt, outcome: 'committed', rowsRead: rows, rowsLoaded: rows,
      rowsRejected: 0, commits: 1, cursorMin: null, cursorMax: null, full: false, worker: 'test', error: null,
    },
    rejects: [],
    swap: false,
    ledger: [entry],
    ledgerExpect: { [partition]: expect },
  };
  try {
    await txn.commit(request);
  } catch (error) {
    await txn.rollback();
    throw error;
  }
  return entry;
}

const partitionFence = (partition: string, token: number, pipelineToken = 0): Fence => ({
  pipeline: 'p',
  token: pipelineToken,
  partition: { lease: partitionLeaseName('p', 'trips', partition), token },
});

describe('partition commits into Postgres', () => {
  it('keep lease names to safe segments', () => {
    expect(partitionLeaseName('taxi', 'trips', '2024-01')).toBe('taxi/trips/2024-01');
    expect(partitionLeaseName('taxi', 'trips', '2024/01')).toBe('taxi/trips/2024%2F01');
    expect(partitionLeaseName('taxi', 'trips', '..')).toBe('taxi/trips/%2E.');
    expect(partitionLeaseName('taxi', 'trips', 'Zürich x')).toBe('taxi/trips/Z%C3%BCrich%20x');
    expect(partitionLeaseName('taxi', 'trips', '')).toBe('taxi/trips/%');
  });

  it('are fenced per partition, write no pipeline state, and compare-and-set their ledger row', async () => {
    const jan = await load('2024-01', partitionFence('2024-01', 2), null);
    const feb = await load('2024-02', partitionFence('2024-02', 1), null);
    // A zombie of January (older token) is refused; February's token is its own.
    await expect(load('2024-01', partitionFence('2024-01', 1), { runId: jan.runId, loadedAt: jan.loadedAt })).rejects.toBeInstanceOf(ConflictError);
    // A stale load that planned against no row (or an older row) cannot overwrite the newer ledger row.
    await expect(load('2024-02', partitionFence('2024-02', 1), null)).rejects.toThrow(/was loaded by run/);
    const reloaded = await load('2024-02', partitionFence('2024-02', 1), { runId: feb.runId, loadedAt: feb.loadedAt }, 5);
    const ledger = await db.query(`SELECT "partition", run_id, "rows"::int AS n FROM _tidemark_ledger ORDER BY 1`);
    expect(ledger.map((r) => [r.partition, r.run_id, Number(r.n)])).toEqual([
      ['2024-01', jan.runId, 3],
      ['2024-02', reloaded.runId, 5],
    ]);
    expect((await db.query(`SELECT month, count(*)::int AS n FROM trips GROUP BY 1 ORDER BY 1`)).map((r) => Number(r.n))).toEqual([3, 5]);
    expect(await db.query(`SELECT * FROM _tidemark_state`)).toEqual([]);
    // The pipeline token is only checked: an exclusive run's later commit (token 1) is refused nothing.
    expect((await db.query(`SELECT pipeline FROM _tidemark_locks ORDER BY 1`)).map((r) => r.pipeline)).toEqual(['p/trips/2024-01', 'p/trips/2024-02']);
    // Once an exclusive run with a newer pipeline token has committed, partition jobs holding an older one are refused.
    await load('2024-03', { pipeline: 'p', token: 4 }, null);
    await expect(load('2024-04', partitionFence('2024-04', 1, 3), null)).rejects.toThrow(/taken over by token 4/);
  });

  it('hold the pipeline lease shared: side by side, but never beside an exclusive holder', async () => {
    const leases = new PostgresLeaseProvider(db.url, 'public');
    const a = await leases.acquireShared('q', { ttlMs: 30_000 });
    const b = await leases.acquireShared('q', { ttlMs: 30_000 });
    await expect(leases.acquire('q', { ttlMs: 30_000 })).rejects.toThrow(/2 partition job\(s\) running/);
    await a.release();
    await b.release();
    const whole = await leases.acquire('q', { ttlMs: 30_000 });
    await expect(leases.acquireShared('q', { ttlMs: 30_000 })).rejects.toThrow(/running exclusively/);
    await whole.release();
    const c = await leases.acquireShared('q', { ttlMs: 30_000 });
    expect(c.token).toBe(whole.token);
    await c.assertHeld();
    await c.release();
  });
});
