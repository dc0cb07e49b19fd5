/**
 * The state-store conformance suite: every store outside the destination runs it against the real thing.
 * load / compare-and-set save / history / repair / lease exclusivity / fencing-token growth.
 */
import { afterEach, beforeEach, describe, expect, it as vitestIt } from 'vitest';
import { ConflictError } from '../../src/core/errors.js';
import type { PipelineState } from '../../src/core/types.js';
import type { ExternalStateStore } from '../../src/state/state-store.js';

export interface StateStoreHarness {
  open(): Promise<ExternalStateStore>;
  cleanup(): Promise<void>;
}

function state(pipeline: string, version: number, mark: string): PipelineState {
  return {
    pipeline,
    version,
    streams: { items: { strategy: 'incremental', cursorColumn: 'updated_at', watermark: { cursor: { type: 'timestamp', value: mark }, pk: [{ type: 'int64', value: '9007199254740993' }] } } },
  };
}

/**
 * Declared skips: a test whose name starts with a key does not apply to this kind (the value says why), e.g.
 * `{ merge: 'a lake cannot upsert in place' }`.
 */
export interface ConformanceOptions {
  readonly skip?: Readonly<Record<string, string>>;
}

export function stateStoreConformance(kind: string, makeHarness: () => Promise<StateStoreHarness>, options: ConformanceOptions = {}): void {
  const it = (name: string, fn: () => Promise<void>): void => {
    const skipped = Object.keys(options.skip ?? {}).some((prefix) => name.startsWith(prefix));
    (skipped ? vitestIt.skip : vitestIt)(name, fn);
  };
  describe(`state store conformance: ${kind}`, () => {
    let harness: StateStoreHarness;
    let store: ExternalStateStore;

    beforeEach(async () => {
      harness = await makeHarness();
      store = await harness.open();
    });
    afterEach(async () => {
      await store.close().catch(() => undefined);
      await harness.cleanup();
    });

    it('load of an unknown pipeline is undefined; saved state round-trips exactly', async () => {
      expect(await store.load('p')).toBeUndefined();
      expect(await store.history('p')).toEqual([]);
      const s1 = state('p', 1, '2024-01-01 00:00:00.000001');
      await store.save(s1, undefined, { runId: 'r1', reason: 'run' });
      expect(await store.load('p')).toEqual(s1);
      expect(await store.load('other')).toBeUndefined();
    });

    it('run marks and user metadata round-trip as written (keys not renamed, values exact)', async () => {
      const base = state('p', 1, '2024-01-01 00:00:00.000001');
      const marked: PipelineState = {
        ...base,
        streams: {
          items: {
            ...base.streams.items!,
            runCount: 3,
            lastRunAt: '2026-12-02T10:00:00.123Z',
            lastRunId: '20261202T100000123Z-0a1b2c3d',
            metadata: { ownerTeam: 'data', 'retention.days': '30', note: 'ünïcode "quoted" \\ back' },
          },
        },
      };
      await store.save(marked, undefined, { runId: 'r1', reason: 'run' });
      expect(await store.load('p')).toEqual(marked);
      expect((await store.history('p'))[0]!.state).toEqual(marked);
    });

    it('save is compare-and-set; history keeps every version, newest first', async () => {
      await store.save(state('p', 1, 'a'), undefined, { runId: 'r1', reason: 'run' });
      await store.save(state('p', 2, 'b'), 1, { runId: 'r2', reason: 'run' });
      await expect(store.save(state('p', 3, 'c'), 1, { runId: 'r3', reason: 'run' })).rejects.toBeInstanceOf(ConflictError);
      await expect(store.save(state('p', 1, 'c'), undefined, { runId: 'r3', reason: 'run' })).rejects.toBeInstanceOf(ConflictError);
      expect((await store.load('p'))?.version).toBe(2);
      const history = await store.history('p');
      expect(history.map((v) => [v.version, v.runId, v.reason])).toEqual([[2, 'r2', 'run'], [1, 'r1', 'run']]);
      expect(history[1]!.state).toEqual(state('p', 1, 'a'));
    });

    it('pipelines lists every pipeline\'s current state by name; remove deletes one with its history', async () => {
      expect(await store.pipelines()).toEqual([]);
      await store.save(state('b_pipe', 1, 'a'), undefined, { runId: 'r1', reason: 'run' });
      await store.save(state('b_pipe', 2, 'b'), 1, { runId: 'r2', reason: 'run' });
      await store.save(state('a_pipe', 1, 'c'), undefined, { runId: 'r3', reason: 'run' });
      expect((await store.pipelines()).map((p) => [p.pipeline, p.version])).toEqual([['a_pipe', 1], ['b_pipe', 2]]);
      expect(await store.remove('b_pipe')).toBe(2);
      expect(await store.load('b_pipe')).toBeUndefined();
      expect(await store.history('b_pipe')).toEqual([]);
      expect((await store.pipelines()).map((p) => p.pipeline)).toEqual(['a_pipe']);
      expect(await store.remove('b_pipe')).toBe(0);
      // Gone for good: the name starts afresh at version 1.
      await store.save(state('b_pipe', 1, 'd'), undefined, { runId: null, reason: 'run' });
      expect(await store.load('b_pipe')).toEqual(state('b_pipe', 1, 'd'));
    });

    it('a second handle sees the first one\'s saves (state is durable, not cached)', async () => {
      await store.save(state('p', 1, 'a'), undefined, { runId: null, reason: 'run' });
      const other = await harness.open();
      try {
        expect(await other.load('p')).toEqual(state('p', 1, 'a'));
        await other.save(state('p', 2, 'b'), 1, { runId: null, reason: 'run' });
      } finally {
        await other.close();
      }
      await expect(store.save(state('p', 2, 'x'), 1, { runId: null, reason: 'run' })).rejects.toBeInstanceOf(ConflictError);
      expect(await store.load('p')).toEqual(state('p', 2, 'b'));
    });

    it('repair overwrites whatever is stored', async () => {
      await store.save(state('p', 5, 'a'), undefined, { runId: null, reason: 'run' });
      await store.repair(state('p', 9, 'z'), { runId: null, reason: 'repaired' });
      expect(await store.load('p')).toEqual(state('p', 9, 'z'));
      await store.save(state('p', 10, 'y'), 9, { runId: null, reason: 'run' });
    });

    it('lease: one holder at a time; tokens grow with every taking; release frees it', async () => {
      const first = await store.acquire('p', { ttlMs: 30_000 });
      await first.assertHeld();
      await expect(store.acquire('p', { ttlMs: 30_000 })).rejects.toBeInstanceOf(ConflictError);
      // Other pipelines are independent.
      const otherPipeline = await store.acquire('q', { ttlMs: 30_000 });
      await otherPipeline.release();
      await first.release();
      const second = await store.acquire('p', { ttlMs: 30_000 });
      expect(second.token).toBeGreaterThan(first.token);
      await second.assertHeld();
      await second.release();
      const third = await store.acquire('p', { ttlMs: 30_000 });
      expect(third.token).toBeGreaterThan(second.token);
      await third.release();
    });

    it('lease: a minimum token raises the next one (a new lock store starts above the fence its destination saw)', async () => {
      const first = await store.acquire('m', { ttlMs: 30_000 });
      await first.release();
      const raised = await store.acquire('m', { ttlMs: 30_000, minToken: first.token + 40 });
      expect(raised.token).toBe(first.token + 40);
      await raised.assertHeld();
      await raised.release();
      // Below the store's own count it changes nothing: tokens still only grow.
      const next = await store.acquire('m', { ttlMs: 30_000, minToken: 1 });
      expect(next.token).toBe(raised.token + 1);
      await next.release();
    });

    it('lease: its holder can be read without taking it (what the dashboard shows)', async () => {
      expect(await store.holder!('h')).toBeUndefined();
      const lease = await store.acquire('h', { ttlMs: 30_000 });
      const held = await store.holder!('h');
      expect(held).toMatchObject({ token: lease.token, pid: process.pid, live: true });
      expect(Date.parse(held!.acquiredAt)).not.toBeNaN();
      await store.acquire('h', { ttlMs: 30_000 }).then(
        () => expect.fail('reading the holder must not free the lease'),
        (error: unknown) => expect(error).toBeInstanceOf(ConflictError),
      );
      await lease.release();
      expect(await store.holder!('h')).toMatchObject({ token: lease.token, live: false });
    });

    it('lease: racing acquirers, exactly one wins', async () => {
      const results = await Promise.allSettled(Array.from({ length: 5 }, () => store.acquire('race', { ttlMs: 30_000 })));
      const won = results.filter((r) => r.status === 'fulfilled');
      expect(won).toHaveLength(1);
      for (const r of results) if (r.status === 'rejected') expect(r.reason, String((r.reason as Error).message)).toBeInstanceOf(ConflictError);
      await (won[0] as PromiseFulfilledResult<Awaited<ReturnType<ExternalStateStore['acquire']>>>).value.release();
    });
  });
}
