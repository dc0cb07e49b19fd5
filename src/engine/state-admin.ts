/**
 * `tidemark state …`: inspect and edit a pipeline's state. Every edit is a new version (compare-and-set, under
 * the pipeline's lease), so history keeps what was there and `rollback` can restore it.
 */
import type { Lease, StateStore } from '../core/connector.js';
import { StateError, UsageError } from '../core/errors.js';
import type { PipelineState, PipelineStateVersion, StreamState, TypedValue } from '../core/types.js';
import { ValueRejection, parseTyped } from '../core/values.js';
import type { PipelineConfig } from '../config/load.js';
import { leaseProviderFor, openDestination, openSource } from '../registry/index.js';
import { emptyState } from './run.js';

export interface OpenedStateStore {
  readonly store: StateStore;
  close(): Promise<void>;
}

export async function openStateStore(pipeline: PipelineConfig): Promise<OpenedStateStore> {
  const destination = await openDestination(pipeline.destination);
  return { store: destination.state, close: () => destination.close() };
}

/** Singer's state shape, with tidemark's exact watermark kept beside the tap-visible bookmark. */
export interface SingerState {
  readonly bookmarks: Record<string, Record<string, unknown>>;
}

export function stateCommands(pipeline: PipelineConfig) {
  const name = pipeline.name;

  async function withStore<T>(fn: (store: StateStore) => Promise<T>): Promise<T> {
    const opened = await openStateStore(pipeline);
    try {
      return await fn(opened.store);
    } finally {
      await opened.close();
    }
  }

  /** Edits run under the lease so they never interleave with a run's commits. */
  async function edit(reason: string, change: (current: PipelineState) => Promise<PipelineState> | PipelineState): Promise<PipelineState> {
    const lease: Lease = await leaseProviderFor(pipeline.destination).acquire(name, { ttlMs: pipeline.lockTtlMs });
    try {
      return await withStore(async (store) => {
        const current = (await store.load(name)) ?? emptyState(name);
        const changed = await change(current);
        const next: PipelineState = { pipeline: name, version: current.version + 1, streams: changed.streams };
        await store.save(next, current.version === 0 ? undefined : current.version, { runId: null, reason });
        return next;
      });
    } finally {
      await lease.release();
    }
  }

  function streamConfig(stream: string) {
    const config = pipeline.streams.find((s) => s.name === stream);
    if (!config) throw new UsageError(`pipeline ${name} has no stream ${stream} (streams: ${pipeline.streams.map((s) => s.name).join(', ')})`);
    return config;
  }

  async function columnKinds(stream: string): Promise<Map<string, TypedValue['type']>> {
    const source = await openSource(pipeline.source);
    try {
      const schema = await source.discover(streamConfig(stream));
      return new Map(schema.columns.map((c) => [c.name, c.type.kind]));
    } finally {
      await source.close();
    }
  }

  function typed(kind: TypedValue['type'], input: string, what: string): TypedValue {
    try {
      return parseTyped(kind, input);
    } catch (error) {
      if (error instanceof ValueRejection) throw new UsageError(`${what}: ${error.message}`);
      throw error;
    }
  }

  return {
    show: () => withStore(async (store) => (await store.load(name)) ?? emptyState(name)),
    history: (): Promise<readonly PipelineStateVersion[]> => withStore((store) => store.history(name)),

    async set(stream: string, cursor: string, pk: readonly string[] = []): Promise<PipelineState> {
      const config = streamConfig(stream);
      if (config.cursor === undefined) throw new UsageError(`stream ${stream} has no cursor; only incremental streams have a watermark`);
      const kinds = await columnKinds(stream);
      const pkColumns = config.primaryKey.length ? config.primaryKey : [];
      if (pk.length !== 0 && pk.length !== pkColumns.length) {
        throw new UsageError(`stream ${stream} has a primary key of ${pkColumns.length} column(s) (${pkColumns.join(', ')}); got ${pk.length} --pk value(s)`);
      }
      const cursorValue = typed(kinds.get(config.cursor)!, cursor, `--cursor for ${config.cursor}`);
      // Without --pk the watermark sits before every row of that cursor value, so all of them are read again.
      const pkValues = pk.length ? pkColumns.map((c, i) => typed(kinds.get(c)!, pk[i]!, `--pk for ${c}`)) : [];
      return edit(`set ${stream}`, (current) => {
        const prior = current.streams[stream];
        const next: StreamState = {
          strategy: config.strategy,
          cursorColumn: config.cursor!,
          primaryKey: pkColumns,
          ...(prior?.generation !== undefined ? { generation: prior.generation } : {}),
          watermark: pk.length ? { cursor: cursorValue, pk: pkValues } : { cursor: cursorValue, pk: [] },
          updatedAt: new Date().toISOString(),
        };
        return { ...current, streams: { ...current.streams, [stream]: next } };
      });
    },

    reset(stream?: string): Promise<PipelineState> {
      if (stream !== undefined) streamConfig(stream);
      return edit(stream ? `reset ${stream}` : 'reset', (current) => {
        if (stream === undefined) return { ...current, streams: {} };
        const streams = { ...current.streams };
        delete streams[stream];
        return { ...current, streams };
      });
    },

    async rollback(version: number): Promise<PipelineState> {
      const versions = await withStore((store) => store.history(name));
      const target = versions.find((v) => v.version === version);
      if (!target) throw new StateError(`pipeline ${name} has no state version ${version} (have ${versions.map((v) => v.version).join(', ') || 'none'})`);
      return edit(`rollback to ${version}`, () => target.state);
    },

    async exportSinger(): Promise<SingerState> {
      const state = (await withStore((store) => store.load(name))) ?? emptyState(name);
      const bookmarks: Record<string, Record<string, unknown>> = {};
      for (const [stream, s] of Object.entries(state.streams)) {
        bookmarks[stream] = {
          ...(s.cursorColumn !== undefined ? { replication_key: s.cursorColumn } : {}),
          ...(s.watermark ? { replication_key_value: s.watermark.cursor.value } : {}),
          tidemark: s,
        };
      }
      return { bookmarks };
    },

    async importSinger(input: unknown): Promise<PipelineState> {
      const bookmarks = (input as SingerState | null)?.bookmarks;
      if (bookmarks === null || typeof bookmarks !== 'object') throw new UsageError('expected Singer state of the form {"bookmarks": {...}}');
      const imported: Record<string, StreamState> = {};
      for (const [stream, bookmark] of Object.entries(bookmarks)) {
        const config = streamConfig(stream);
        if (bookmark.tidemark !== undefined) {
          imported[stream] = bookmark.tidemark as StreamState;
          continue;
        }
        const value = bookmark.replication_key_value;
        if (value === undefined || config.cursor === undefined) continue;
        const kinds = await columnKinds(stream);
        imported[stream] = {
          strategy: config.strategy,
          cursorColumn: config.cursor,
          primaryKey: config.primaryKey,
          watermark: { cursor: typed(kinds.get(config.cursor)!, String(value), `bookmark of ${stream}`), pk: [] },
          updatedAt: new Date().toISOString(),
        };
      }
      return edit('import', (current) => ({ ...current, streams: { ...current.streams, ...imported } }));
    },
  };
}
