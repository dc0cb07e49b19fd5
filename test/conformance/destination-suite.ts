/**
 * The destination conformance suite: every destination runs it against its real engine. It drives the Destination
 * seam directly (begin / write / commit) and reads back through the destination's own `query(sql)`.
 */
import { afterEach, beforeEach, describe, expect, it as vitestIt } from 'vitest';
import type { CommitRequest, Destination, LoadTransaction, TableTarget } from '../../src/core/connector.js';
import { ConflictError } from '../../src/core/errors.js';
import { resetFailpoints } from '../../src/core/failpoints.js';
import type { Column, PipelineState, Row, RunRecord, StreamSchema } from '../../src/core/types.js';

export type QueryableDestination = Destination & { query(sql: string): Promise<Record<string, unknown>[]> };

export interface DestinationHarness {
  /** Opens the destination under test (a fresh, empty one per test). */
  open(): Promise<QueryableDestination>;
  /** SQL that reads a column as text, for comparisons that do not depend on the driver's value types. */
  text(column: string): string;
  cleanup(): Promise<void>;
}

const PIPELINE = 'conformance';

const columns: Column[] = [
  { name: 'id', type: { kind: 'int64' }, nullable: false },
  { name: 'updated_at', type: { kind: 'timestamp' }, nullable: true },
  { name: 'value', type: { kind: 'text' }, nullable: true },
];
const schema: StreamSchema = { name: 'items', columns, primaryKey: ['id'], cursor: 'updated_at' };

function runRecord(runId: string): RunRecord {
  const now = new Date().toISOString();
  return {
    runId, pipeline: PIPELINE, stream: 'items', startedAt: now, finishedAt: now, outcome: 'committed', rowsRead: 0, rowsLoaded: 0,
    rowsRejected: 0, commits: 1, cursorMin: null, cursorMax: null, full: false, worker: 'test', error: null,
  };
}

function state(version: number, note = 'x'): PipelineState {
  return { pipeline: PIPELINE, version, streams: { items: { strategy: 'incremental', cursorColumn: 'updated_at', lastRunId: note } } };
}

function request(version: number, extra: Partial<CommitRequest> = {}): CommitRequest {
  return { state: state(version), run: runRecord(`run-${version}`), rejects: [], swap: false, ...extra };
}

function row(id: number, second: number, value: string): Row {
  return [BigInt(id), `2024-01-01 00:00:${String(second).padStart(2, '0')}.000001`, value];
}

/**
 * Declared skips: a test whose name starts with a key does not apply to this kind (the value says why), e.g.
 * `{ merge: 'a lake cannot upsert in place' }`.
 */
export interface ConformanceOptions {
  readonly skip?: Readonly<Record<string, string>>;
}

export function destinationConformance(kind: string, makeHarness: () => Promise<DestinationHarness>, options: ConformanceOptions = {}): void {
  const it = (name: string, fn: () => Promise<void>): void => {
    const skipped = Object.keys(options.skip ?? {}).some((prefix) => name.startsWith(prefix));
    (skipped ? vitestIt.skip : vitestIt)(name, fn);
  };
  describe(`destination conformance: ${kind}`, () => {
    let harness: DestinationHarness;
    let dest: QueryableDestination;
    let version: number;

    beforeEach(async () => {
      harness = await makeHarness();
      dest = await harness.open();
      version = 0;
    });
    afterEach(async () => {
      resetFailpoints('');
      await dest.close().catch(() => undefined);
      await harness.cleanup();
    });

    async function load(rows: readonly Row[], options: { write?: TableTarget['write']; build?: string; token?: number; schema?: StreamSchema; swap?: boolean; fresh?: boolean } = {}): Promise<void> {
      const txn: LoadTransaction = await dest.begin({
        pipeline: PIPELINE,
        runId: `run-${version + 1}`,
        target: { schema: options.schema ?? schema, write: options.write ?? 'append', ...(options.build !== undefined ? { build: options.build } : {}) },
        fence: { pipeline: PIPELINE, token: options.token ?? 1 },
      });
      await txn.write(rows);
      await txn.commit(request(version + 1, { swap: options.swap ?? false, freshBuild: options.fresh ?? false }));
      version += 1;
    }

    async function contents(table = 'items'): Promise<string[]> {
      const rows = await dest.query(`SELECT ${harness.text('id')} AS id, ${harness.text('value')} AS value FROM ${table} ORDER BY id`);
      return rows.map((r) => `${String(r.id)}:${String(r.value)}`);
    }

    it('append: rows and state land in one commit; state round-trips', async () => {
      await load([row(1, 1, 'a'), row(2, 2, 'b')]);
      await load([row(3, 3, 'c')]);
      expect(await contents()).toEqual(['1:a', '2:b', '3:c']);
      expect(await dest.state.load(PIPELINE)).toEqual(state(2));
      expect((await dest.state.history(PIPELINE)).map((v) => v.version)).toEqual([2, 1]);
      expect((await dest.state.runs(PIPELINE, 10)).map((r) => r.runId)).toContain('run-2');
    });

    it('merge: upserts on the primary key, the latest cursor wins within a batch', async () => {
      await load([row(1, 1, 'a1'), row(2, 1, 'b1')], { write: 'merge' });
      // id 1 appears three times in one batch, out of cursor order: second 9 wins.
      await load([row(1, 9, 'a-latest'), row(3, 2, 'c1'), row(1, 5, 'a-older'), row(1, 3, 'a-oldest')], { write: 'merge' });
      expect(await contents()).toEqual(['1:a-latest', '2:b1', '3:c1']);
    });

    it('replace: a build generation is swapped in whole, in one commit', async () => {
      await load([row(1, 1, 'old1'), row(2, 1, 'old2')]);
      // The build is committed in two steps; the live table is untouched until the swap.
      await load([row(10, 1, 'new10')], { build: 'g1', fresh: true });
      expect(await contents()).toEqual(['1:old1', '2:old2']);
      await load([row(11, 1, 'new11')], { build: 'g1', swap: true });
      expect(await contents()).toEqual(['10:new10', '11:new11']);
    });

    it('schema evolution: a new source column is added, older rows read NULL', async () => {
      await load([row(1, 1, 'a')]);
      const wider: StreamSchema = { ...schema, columns: [...columns, { name: 'extra', type: { kind: 'int32' }, nullable: true }] };
      await load([[2n, '2024-01-01 00:00:02.000000', 'b', 7]], { schema: wider });
      const rows = await dest.query(`SELECT ${harness.text('id')} AS id, ${harness.text('extra')} AS extra FROM items ORDER BY id`);
      expect(rows.map((r) => [String(r.id), r.extra === null ? null : String(r.extra)])).toEqual([['1', null], ['2', '7']]);
    });

    it('atomicity: a failure right before COMMIT leaves data and state as they were', async () => {
      await load([row(1, 1, 'a')]);
      resetFailpoints('load.before_commit=1:throw');
      await expect(load([row(2, 2, 'b')])).rejects.toThrow(/failpoint/);
      resetFailpoints('');
      expect(await contents()).toEqual(['1:a']);
      expect((await dest.state.load(PIPELINE))?.version).toBe(1);
      // The destination is still usable, and the same version commits now.
      await load([row(2, 2, 'b')]);
      expect(await contents()).toEqual(['1:a', '2:b']);
    });

    it('fencing: a commit with a token older than one already seen is refused', async () => {
      await load([row(1, 1, 'a')], { token: 5 });
      await expect(load([row(2, 2, 'zombie')], { token: 4 })).rejects.toBeInstanceOf(ConflictError);
      expect(await contents()).toEqual(['1:a']);
      await load([row(3, 3, 'c')], { token: 6 });
      expect(await contents()).toEqual(['1:a', '3:c']);
    });

    it('state: run marks and metadata round-trip; a run record written outside a load (a run that moved nothing) is listed', async () => {
      await load([row(1, 1, 'a')]);
      const marked: PipelineState = {
        pipeline: PIPELINE,
        version: 2,
        streams: { items: { strategy: 'incremental', cursorColumn: 'updated_at', runCount: 2, lastRunAt: '2026-12-02T10:00:00.000Z', lastRunId: 'quiet', metadata: { ownerTeam: 'data' } } },
      };
      await dest.state.save(marked, 1, { runId: 'quiet', reason: 'run (nothing new)' });
      await dest.state.recordFailure({ ...runRecord('quiet'), commits: 0 });
      expect(await dest.state.load(PIPELINE)).toEqual(marked);
      const runs = await dest.state.runs(PIPELINE, 10);
      expect(runs.map((r) => [r.runId, r.outcome, r.commits])).toEqual(expect.arrayContaining([['quiet', 'committed', 0], ['run-1', 'committed', 1]]));
      expect(runs).toHaveLength(2);
    });

    it('state: compare-and-set refuses a moved version; a commit with a stale version writes nothing', async () => {
      await dest.state.save(state(1, 'one'), undefined, { runId: null, reason: 'test' });
      await dest.state.save(state(2, 'two'), 1, { runId: null, reason: 'test' });
      await expect(dest.state.save(state(3, 'three'), 1, { runId: null, reason: 'test' })).rejects.toBeInstanceOf(ConflictError);
      expect(await dest.state.load(PIPELINE)).toEqual(state(2, 'two'));
      version = 0; // the load below claims version 1, but the store is at 2
      await expect(load([row(1, 1, 'a')])).rejects.toBeInstanceOf(ConflictError);
      const history = await dest.state.history(PIPELINE);
      expect(history.map((v) => [v.version, v.state.streams.items?.lastRunId])).toEqual([[2, 'two'], [1, 'one']]);
    });
  });
}
