/**
 * `tidemark state …`: inspect and edit a pipeline's state. Every edit is a new version (compare-and-set, under
 * the pipeline's lease), so history keeps what was there and `rollback` can restore it.
 */
import { isSyncPosition, type Destination, type JsonValue, type Lease, type LeaseProvider, type StateStore } from '../core/connector.js';
import { exportAirbyteState, importAirbyteState } from './airbyte-state.js';
import { newRunId } from '../core/ids.js';
import { StateError, UsageError, errorMessage } from '../core/errors.js';
import type { PipelineState, PipelineStateVersion, StreamState } from '../core/types.js';
import type { PipelineConfig } from '../config/load.js';
import type { StateConfig, StateStoreConfig } from '../config/schema.js';
import { silentLogger } from '../core/logger.js';
import { createStateStore, leaseProviderFor, openDestination, type OpenDestinationOptions } from '../registry/index.js';
import { openPipelineState, plannedState, storeOptions, type StateDifference } from './state-sync.js';
import { emptyState } from './run.js';
import { exportTapState, type SingerState, type TapState } from './singer-document.js';
import { LazySource, appendStreams, columnKinds, hasLoaded, movesBack, prepareSet, streamConfig as configOf, typedInput } from './state-set.js';
import { keptMarks } from './run-marks.js';

export type { SingerState, TapState } from './singer-document.js';

export interface OpenedStateStore {
  readonly store: StateStore;
  close(): Promise<void>;
}

/**
 * The pipeline's state store as `tidemark state` and `tidemark runs` see it. With a separate store, state and its
 * history come from that store, while runs and rejects (written by the load commits) come from the destination,
 * opened only when asked for. `openTimeoutMs` lets readers such as `tidemark ui` give up quickly while a run holds
 * the destination file.
 */
export async function openStateStore(pipeline: PipelineConfig, options: OpenDestinationOptions = {}): Promise<OpenedStateStore> {
  if (pipeline.state === 'destination') {
    const destination = await openDestination(pipeline.destination, options);
    return { store: destination.state, close: () => destination.close() };
  }
  const external = await createStateStore(pipeline.state, storeOptions(pipeline));
  let destination: Promise<Destination> | undefined;
  const records = async (): Promise<StateStore> => (await (destination ??= openDestination(pipeline.destination, options))).state;
  const store: StateStore = {
    load: (p) => external.load(p),
    save: (next, expected, m) => external.save(next, expected, m),
    history: (p) => external.history(p),
    runs: async (p, limit) => (await records()).runs(p, limit),
    rejects: async (p, limit, stream) => (await records()).rejects(p, limit, stream),
    closeInterruptedRuns: async (p) => (await records()).closeInterruptedRuns(p),
    recordFailure: async (r) => (await records()).recordFailure(r),
    close: async () => undefined,
  };
  return {
    store,
    async close() {
      try {
        await external.close();
      } finally {
        if (destination !== undefined) await (await destination).close();
      }
    },
  };
}

/** Opens one end of `tidemark state migrate`: the destination's own tables, or a separate store. */
async function openStateEnd(pipeline: PipelineConfig, config: StateConfig): Promise<OpenedStateStore & { readonly name: string }> {
  if (config === 'destination') {
    const destination = await openDestination(pipeline.destination);
    return { name: 'the destination', store: destination.state, close: () => destination.close() };
  }
  const store = await createStateStore(config, storeOptions(pipeline));
  return { name: store.description, store, close: () => store.close() };
}

/** What `tidemark state show` prints: the state the next run will use, and where the store disagrees. */
export interface ShownState {
  readonly state: PipelineState;
  /** Set when the store and the destination disagree (the destination's state is shown) or could not be compared. */
  readonly warning?: string;
  readonly differences?: readonly StateDifference[];
}

export interface MigrateResult {
  /** Versions written to the target (0 when it already held the same state). */
  readonly copied: number;
  readonly state: PipelineState;
}

/** One pipeline of a state store, as `tidemark state list` shows it. */
export interface StoredPipeline {
  readonly pipeline: string;
  readonly version: number;
  readonly streams: readonly string[];
  /** The run of the newest stream commit, and when it was (absent when only edits wrote the state). */
  readonly lastRunId: string | null;
  readonly lastUpdate: string | null;
}

export function storedPipeline(state: PipelineState): StoredPipeline {
  const streams = Object.entries(state.streams);
  const newest = streams.filter(([, s]) => s.updatedAt !== undefined).sort(([, a], [, b]) => b.updatedAt!.localeCompare(a.updatedAt!))[0]?.[1];
  const lastRun = streams.filter(([, s]) => s.lastRunId !== undefined).sort(([, a], [, b]) => b.lastRunId!.localeCompare(a.lastRunId!))[0]?.[1];
  return { pipeline: state.pipeline, version: state.version, streams: streams.map(([name]) => name).sort(), lastRunId: lastRun?.lastRunId ?? null, lastUpdate: newest?.updatedAt ?? null };
}

/** The pipelines a separate state store holds (a state catalogue): name, streams, version, last run. */
export async function listStoredPipelines(config: StateStoreConfig): Promise<{ readonly store: string; readonly pipelines: readonly StoredPipeline[] }> {
  const store = await createStateStore(config);
  try {
    return { store: store.description, pipelines: (await store.pipelines()).map(storedPipeline) };
  } finally {
    await store.close();
  }
}

/**
 * Removes one pipeline's state and history from a separate store, under the pipeline's lease: that of `owner` (the
 * pipeline's YAML, when known) or else the store's own. Returns the versions removed.
 */
export async function deleteStoredPipeline(config: StateStoreConfig, pipeline: string, owner?: PipelineConfig): Promise<{ readonly store: string; readonly removed: number }> {
  // The owner's own bucket settings name its Singer document, which goes with the state.
  const own = owner?.state !== undefined && owner.state !== 'destination' && owner.state.type === 'bucket' && config.type === 'bucket' && owner.state.location === config.location ? owner.state : undefined;
  const store = await createStateStore(own?.singer_document !== undefined && config.type === 'bucket' ? { ...config, singer_document: own.singer_document } : config);
  try {
    const leases: LeaseProvider = owner !== undefined ? leaseProviderFor(owner.destination, owner.state) : store;
    const lease = await leases.acquire(pipeline, { ttlMs: owner?.lockTtlMs ?? 60_000 });
    try {
      const removed = await store.remove(pipeline);
      if (removed === 0) throw new UsageError(`${store.description} holds no state of pipeline ${pipeline}`);
      return { store: store.description, removed };
    } finally {
      await lease.release();
    }
  } finally {
    await store.close();
  }
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

  /**
   * Edits run under the lease so they never interleave with a run's commits. With a separate store, both it and
   * the destination get the edit (after reconciling them), so the two stay at one version.
   */
  async function edit(reason: string, change: (current: PipelineState) => Promise<PipelineState> | PipelineState): Promise<PipelineState> {
    const lease: Lease = await leaseProviderFor(pipeline.destination, pipeline.state).acquire(name, { ttlMs: pipeline.lockTtlMs });
    try {
      const handle = await openPipelineState(pipeline, silentLogger);
      try {
        const current = handle.state;
        const changed = await change(current);
        const next: PipelineState = { pipeline: name, version: current.version + 1, streams: changed.streams };
        await handle.save(next, { runId: null, reason });
        return next;
      } finally {
        await handle.close();
      }
    } finally {
      await lease.release();
    }
  }

  /**
   * Copies the state and its history from one store to another, under the pipeline's lease. A target that already
   * holds a different state is refused unless `force`, which writes the source's state as the target's next version.
   */
  async function migrate(from: StateConfig, to: StateConfig, options: { force?: boolean } = {}): Promise<MigrateResult> {
    if (JSON.stringify(from) === JSON.stringify(to)) throw new UsageError('state migrate: --from and --to are the same store');
    const lease: Lease = await leaseProviderFor(pipeline.destination, pipeline.state).acquire(name, { ttlMs: pipeline.lockTtlMs });
    try {
      const source = await openStateEnd(pipeline, from);
      try {
        const target = await openStateEnd(pipeline, to);
        try {
          const current = await source.store.load(name);
          if (current === undefined) throw new UsageError(`state migrate: ${source.name} holds no state of pipeline ${name}`);
          const existing = await target.store.load(name);
          if (existing !== undefined) {
            if (existing.version === current.version && JSON.stringify(existing.streams) === JSON.stringify(current.streams)) return { copied: 0, state: existing };
            if (!options.force) {
              throw new UsageError(
                `state migrate: ${target.name} already holds state version ${existing.version} of pipeline ${name} (source has version ${current.version}); use --force to write the source's state on top of it`,
              );
            }
            const next: PipelineState = { pipeline: name, version: existing.version + 1, streams: current.streams };
            await target.store.save(next, existing.version, { runId: null, reason: `migrated from ${source.name}` });
            return { copied: 1, state: next };
          }
          // Oldest first, keeping version numbers, so the target's history reads like the source's.
          const versions = [...(await source.store.history(name))].filter((v) => v.version < current.version).sort((a, b) => a.version - b.version);
          let previous: number | undefined;
          for (const v of versions) {
            await target.store.save({ pipeline: name, version: v.version, streams: v.state.streams }, previous, { runId: v.runId, reason: v.reason });
            previous = v.version;
          }
          await target.store.save(current, previous, { runId: null, reason: `migrated from ${source.name}` });
          return { copied: versions.length + 1, state: current };
        } finally {
          await target.close();
        }
      } finally {
        await source.close();
      }
    } finally {
      await lease.release();
    }
  }

  const streamConfig = (stream: string) => configOf(pipeline, stream);

  /** Runs `fn` with the source opened on first use, closed after. */
  async function withSource<T>(fn: (source: LazySource) => Promise<T>): Promise<T> {
    const source = new LazySource(pipeline);
    try {
      return await fn(source);
    } finally {
      await source.close();
    }
  }

  /**
   * The state the next run will use: with a separate store, reconciled (read-only) against the destination, which
   * wins where the store is ahead of it; `warning` says where they differ. A destination that cannot be opened now
   * (a run holds its file) leaves the store's state, said so.
   */
  async function shownState(): Promise<ShownState> {
    if (pipeline.state === 'destination') return { state: await withStore(async (store) => (await store.load(name)) ?? emptyState(name)) };
    let destination: Destination;
    try {
      destination = await openDestination(pipeline.destination, { openTimeoutMs: 2000 });
    } catch (error) {
      const state = await withStore(async (store) => (await store.load(name)) ?? emptyState(name));
      return { state, warning: `the destination could not be opened to check the store against it (${errorMessage(error)}); this is the store's state` };
    }
    try {
      const planned = await plannedState(pipeline, destination.state);
      return { state: planned.state, ...(planned.warning !== undefined ? { warning: planned.warning } : {}), ...(planned.differences ? { differences: planned.differences } : {}) };
    } finally {
      await destination.close();
    }
  }

  return {
    migrate,
    /** The state the next run will use (see `inspect` for where the store and the destination disagree). */
    show: async (): Promise<PipelineState> => (await shownState()).state,
    inspect: shownState,
    history: (): Promise<readonly PipelineStateVersion[]> => withStore((store) => store.history(name)),

    async set(stream: string, cursor: string, pk: readonly string[] = []): Promise<PipelineState> {
      streamConfig(stream);
      const stored = (await withStore((store) => store.load(name)))?.streams[stream];
      const prepared = await withSource((source) => prepareSet(pipeline, stored, { stream, cursor, pk }, source));
      return edit(`set ${stream}`, (current) => prepared.apply(current));
    },

    /**
     * Sets the sync token (or delta link) an HTTP `sync:` stream's next run starts from. On an append stream that has
     * loaded rows it is refused: the changes since an older token would be appended again (`run --full` rebuilds).
     */
    async setSyncToken(stream: string, token: string): Promise<PipelineState> {
      const config = streamConfig(stream);
      if (config.http?.sync === undefined) throw new UsageError(`stream ${stream} has no sync: section; --sync-token sets the position of an HTTP sync stream (use --cursor for a watermark)`);
      if (token === '') throw new UsageError('--sync-token: expected the token or delta link the next run starts from');
      return edit(`set ${stream} sync token`, (current) => {
        const prior = current.streams[stream];
        if (config.write === 'append' && prior !== undefined && hasLoaded(prior)) {
          throw new UsageError(
            `stream ${stream} appends its rows: starting it from another sync token could append the changes since that token a second time; ` +
              `to load the stream again use tidemark run --full (a new generation is built and swapped in) or tidemark state reset ${stream}`,
          );
        }
        const next: StreamState = {
          strategy: config.strategy,
          primaryKey: prior?.primaryKey ?? config.primaryKey,
          ...(prior?.generation !== undefined ? { generation: prior.generation } : {}),
          ...(prior?.schema !== undefined ? { schema: prior.schema } : {}),
          resume: { v: 1, sync: token },
          updatedAt: new Date().toISOString(),
          ...keptMarks(prior),
        };
        return { ...current, streams: { ...current.streams, [stream]: next } };
      });
    },

    /**
     * Sets (or, with a `null` value, removes) keys of a stream's metadata: the user's own notes, kept in the state
     * beside the position and carried over by every run. The position is left as it is.
     */
    async setMetadata(stream: string, entries: Readonly<Record<string, string | null>>): Promise<PipelineState> {
      const config = streamConfig(stream);
      return edit(`metadata of ${stream}`, (current) => {
        const prior = current.streams[stream];
        const metadata: Record<string, string> = { ...prior?.metadata };
        for (const [key, value] of Object.entries(entries)) {
          if (value === null) delete metadata[key];
          else metadata[key] = value;
        }
        const { metadata: _old, ...rest } = prior ?? { strategy: config.strategy };
        const next: StreamState = { ...rest, ...(Object.keys(metadata).length > 0 ? { metadata } : {}) };
        return { ...current, streams: { ...current.streams, [stream]: next } };
      });
    },

    /**
     * Forgets a stream's position (all streams without `stream`). On an append stream that has loaded rows, reading
     * from the start again would append every row a second time, so the reset is a rebuild instead: the next run
     * builds a new generation beside the live table and swaps it in (as `tidemark run --full` does).
     */
    async reset(stream?: string): Promise<PipelineState> {
      if (stream !== undefined) streamConfig(stream);
      const appending = await withSource((source) => appendStreams(pipeline, stream !== undefined ? [stream] : pipeline.streams.map((s) => s.name), source));
      return edit(stream ? `reset ${stream}` : 'reset', (current) => {
        const streams: Record<string, StreamState> = { ...current.streams };
        for (const name of stream !== undefined ? [stream] : Object.keys(current.streams)) {
          const prior = streams[name];
          if (prior !== undefined && appending.has(name) && hasLoaded(prior)) streams[name] = rebuildOf(prior);
          else delete streams[name];
        }
        return { ...current, streams };
      });
    },

    /**
     * Restores the streams of an earlier version as a new version. An append stream whose restored watermark lies
     * behind the current one is rebuilt instead (see `reset`): re-reading from the older watermark would append
     * the rows loaded since a second time.
     */
    async rollback(version: number): Promise<PipelineState> {
      const versions = await withStore((store) => store.history(name));
      const target = versions.find((v) => v.version === version);
      if (!target) throw new StateError(`pipeline ${name} has no state version ${version} (have ${versions.map((v) => v.version).join(', ') || 'none'})`);
      const appending = await withSource((source) => appendStreams(pipeline, pipeline.streams.map((s) => s.name), source));
      return edit(`rollback to ${version}`, (current) => {
        const streams: Record<string, StreamState> = { ...target.state.streams };
        for (const [stream, now] of Object.entries(current.streams)) {
          if (!appending.has(stream) || !hasLoaded(now)) continue;
          const restored = target.state.streams[stream];
          const otherToken = isSyncPosition(now.resume) && JSON.stringify(restored?.resume ?? null) !== JSON.stringify(now.resume);
          if (restored === undefined || movesBack(restored.watermark, now.watermark) || otherToken) streams[stream] = rebuildOf(now);
        }
        return { ...target.state, streams };
      });
    },

    /** The connector's own state file (`state export --format airbyte`). */
    async exportAirbyte(): Promise<JsonValue> {
      return exportAirbyteState((await withStore((store) => store.load(name))) ?? emptyState(name));
    },

    async importAirbyte(input: unknown): Promise<PipelineState> {
      return edit('import', (current) => importAirbyteState(input, pipeline.streams, current));
    },

    async exportSinger(): Promise<SingerState | TapState> {
      const state = (await withStore((store) => store.load(name))) ?? emptyState(name);
      if (pipeline.source.type === 'singer') return exportTapState(pipeline, state);
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
      if (pipeline.source.type === 'singer') {
        if (input === null || typeof input !== 'object' || Array.isArray(input)) throw new UsageError('expected the tap\'s state: a JSON object such as {"bookmarks": {...}}');
        // The tap's own state is kept verbatim for every stream: each tap run reads the bookmarks it needs.
        return edit('import', (current) => {
          const streams: Record<string, StreamState> = { ...current.streams };
          const names = new Set([...pipeline.streams.map((s) => s.name), ...Object.keys(current.streams)]);
          for (const stream of names) {
            const config = pipeline.streams.find((s) => s.name === stream);
            const prior = current.streams[stream];
            streams[stream] = {
              ...(prior ?? { strategy: config?.strategy ?? 'incremental', primaryKey: config?.primaryKey ?? [] }),
              resume: input,
              updatedAt: new Date().toISOString(),
            };
          }
          return { ...current, streams };
        });
      }
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
        const { kinds } = await withSource((source) => columnKinds(pipeline, stream, source));
        imported[stream] = {
          strategy: config.strategy,
          cursorColumn: config.cursor,
          primaryKey: config.primaryKey,
          watermark: { cursor: typedInput(kinds.get(config.cursor)!, String(value), `bookmark of ${stream}`), pk: [] },
          updatedAt: new Date().toISOString(),
        };
      }
      return edit('import', (current) => ({ ...current, streams: { ...current.streams, ...imported } }));
    },
  };
}

/** The stream as it is, with a new generation to build at the next run: the live table stays until the swap. */
function rebuildOf(stream: StreamState): StreamState {
  const { build: _build, resume: _resume, resumeHigh: _high, ...live } = stream;
  return { ...live, build: { generation: newRunId(), rows: 0 }, updatedAt: new Date().toISOString() };
}
