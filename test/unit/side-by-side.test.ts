/**
 * The state line of streams side by side: commits of several lanes, started at once, each carry the latest state with
 * only their own stream's entry replaced, one version after another (the store below checks the version like the
 * destination's compare-and-set does).
 */
import { describe, expect, it } from 'vitest';
import type { CommitRequest, Destination, LoadTransaction } from '../../src/core/connector.js';
import type { PipelineState, StreamState } from '../../src/core/types.js';
import { StateLine, loadSideBySide } from '../../src/engine/side-by-side.js';

/** A destination whose commits check the version like the real ones, and take a while (so lanes overlap). */
function versionedDestination(store: { state: PipelineState }): Destination {
  const txn = (): LoadTransaction => ({
    write: async () => undefined,
    rollback: async () => undefined,
    commit: async (request: CommitRequest) => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (request.state.version !== store.state.version + 1) throw new Error(`version ${request.state.version} after ${store.state.version}`);
      store.state = request.state;
    },
  });
  return { capabilities: { transactionalState: true, writes: ['append'], schemaEvolution: false }, begin: async () => txn() } as unknown as Destination;
}

const entry = (n: number): StreamState => ({ strategy: 'incremental', primaryKey: [], updatedAt: `2024-01-0${n}T00:00:00Z` });

describe('StateLine', () => {
  it('puts each lane commit onto the latest state: every stream kept, one version each', async () => {
    const store = { state: { pipeline: 'p', version: 3, streams: { kept: entry(1) } } as PipelineState };
    const line = new StateLine(store.state);
    const destination = line.destination(versionedDestination(store));
    const names = ['a', 'b', 'c'];
    // Each lane computes its next state from the state it started with, as a loader does.
    await Promise.all(
      names.flatMap((name) =>
        [1, 2].map(async (k) => {
          const txn = await destination.begin({} as never);
          const own: PipelineState = { pipeline: 'p', version: 4, streams: { [name]: entry(k) } };
          await txn.commit({ state: own, run: { stream: name } as never, rejects: [], swap: false });
        }),
      ),
    );
    expect(store.state.version).toBe(9);
    expect(Object.keys(store.state.streams).sort()).toEqual(['a', 'b', 'c', 'kept']);
    expect(line.state).toEqual(store.state);
  });

  it('loadSideBySide keeps the streams order in its results and throws the first failure after every lane stopped', async () => {
    const streams = ['s1', 's2', 's3', 's4'].map((name) => ({ name }) as never);
    const lanes = [{}, {}] as never[];
    const out = await loadSideBySide(streams, lanes, async (_lane, s: { name: string }) => s.name.toUpperCase());
    expect(out).toEqual(['S1', 'S2', 'S3', 'S4']);
    const started: string[] = [];
    await expect(
      loadSideBySide(streams, lanes, async (_lane, s: { name: string }) => {
        started.push(s.name);
        if (s.name === 's1') throw new Error('boom');
        return s.name;
      }),
    ).rejects.toThrow('boom');
    // The failing lane takes no further stream.
    expect(started).not.toContain('s4');
  });
});
