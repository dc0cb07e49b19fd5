/**
 * `tidemark state …`: inspect and edit a pipeline's state. Every edit is a new version (compare-and-set, under
 * the pipeline's lease), so history keeps what was there and `rollback` can restore it.
 */
import { isSyncPosition, type Destination, type JsonValue, type Lease, type LeaseProvider, type Source, type StateStore } from '../core/connector.js';
import { exportAirbyteState, importAirbyteState } from './airbyte-state.js';
import { newRunId } from '../core/ids.js';
import { StateError, UsageError, errorMessage } from '../core/errors.js';
import type { PipelineState, PipelineStateVersion, StreamState, TypedValue, Watermark } from '../core/types.js';
import { ValueRejection, compareCanonical, parseTyped } from '../core/values.js';
import type { PipelineConfig } from '../config/load.js';
import type { StateConfig, StateStoreConfig } from '../config/schema.js';
import { silentLogger } from '../core/logger.js';
import { createStateStore, leaseProviderFor, openDestination, openSource, type OpenDestinationOptions } from '../registry/index.js';
import { openPipelineState, plannedState, type StateDifference } from './state-sync.js';
import { emptyState } from './run.js';
import { keptMarks } from './run-marks.js';
import { withSourceKey } from './plan.js';
import { withSingerBookmark } from './singer-bookmark.js';

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
  const external = await createStateStore(pipeline.state);
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
  const store = await createStateStore(config);
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
  const store = await createStateStore(config);
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

/** Singer's state shape, with tidemark's exact watermark kept beside the tap-visible bookmark. */
export interface SingerState {
  readonly bookmarks: Record<string, Record<string, unknown>>;
}

/** A Singer tap's own state document, exported and imported without change. */
export type TapState = { readonly [key: string]: unknown };

/**
 * The tap's state as the tap itself wrote it. Every stream of a Singer pipeline stores the STATE of its last
 * commit; when they agree that document is returned as is, otherwise each stream contributes its own bookmark to
 * the newest document. A target pipeline (no command: one tap feeds all streams) returns the newest document.
 */
function exportTapState(pipeline: PipelineConfig, state: PipelineState): TapState {
  const stored = Object.entries(state.streams)
    .filter(([, s]) => s.resume !== undefined && s.resume !== null && typeof s.resume === 'object')
    .sort(([, a], [, b]) => (b.updatedAt ?? '').localeCompare(a.updatedAt ?? ''));
  if (stored.length === 0) return {};
  const newest = stored[0]![1].resume as TapState;
  const sameEverywhere = stored.every(([, s]) => JSON.stringify(s.resume) === JSON.stringify(newest));
  if (sameEverywhere || (pipeline.source.type === 'singer' && pipeline.source.command === undefined)) return newest;
  const bookmarks: Record<string, unknown> = { ...((newest.bookmarks as Record<string, unknown> | undefined) ?? {}) };
  for (const [stream, s] of stored) {
    const tapStream = pipeline.streams.find((c) => c.name === stream)?.singer?.tapStream ?? stream;
    const own = ((s.resume as TapState).bookmarks as Record<string, unknown> | undefined)?.[tapStream];
    if (own !== undefined) bookmarks[tapStream] = own;
  }
  return { ...newest, bookmarks };
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

  function streamConfig(stream: string) {
    const config = pipeline.streams.find((s) => s.name === stream);
    if (!config) throw new UsageError(`pipeline ${name} has no stream ${stream} (streams: ${pipeline.streams.map((s) => s.name).join(', ')})`);
    return config;
  }

  async function columnKinds(stream: string): Promise<{ kinds: Map<string, TypedValue['type']>; primaryKey: readonly string[] }> {
    const source = await openSource(pipeline.source);
    try {
      const schema = await source.discover(streamConfig(stream));
      return { kinds: new Map(schema.columns.map((c) => [c.name, c.type.kind])), primaryKey: schema.primaryKey };
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

  /**
   * The named streams whose rows are appended (incremental, write append; a stream merging on its table's key only
   * when the table has one is asked of the source's catalog).
   */
  async function appendStreams(streams: readonly string[]): Promise<Set<string>> {
    const out = new Set<string>();
    let source: Source | undefined;
    try {
      for (const stream of streams) {
        const config = pipeline.streams.find((s) => s.name === stream);
        if (config === undefined || config.strategy !== 'incremental') continue;
        let settled = config;
        if (config.sourceKey !== undefined) settled = await withSourceKey((source ??= await openSource(pipeline.source)), config);
        if (settled.write === 'append') out.add(stream);
      }
    } finally {
      await source?.close();
    }
    return out;
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
      const configured = streamConfig(stream);
      // A Singer stream's cursor is the tap's replication key, recorded with its state.
      const stored = (await withStore((store) => store.load(name)))?.streams[stream];
      const singer = pipeline.source.type === 'singer' && configured.cursor === undefined ? stored?.cursorColumn : undefined;
      const config = singer !== undefined ? { ...configured, cursor: singer } : configured;
      if (config.cursor === undefined) throw new UsageError(`stream ${stream} has no cursor; only incremental streams have a watermark`);
      const { kinds, primaryKey } = singer !== undefined && stored?.watermark !== undefined ? { kinds: new Map([[singer, stored.watermark.cursor.type]]), primaryKey: stored.primaryKey ?? [] } : await columnKinds(stream);
      // A stream without primary_key merges on its table's own key, as the catalog declares it.
      const pkColumns = config.primaryKey.length ? config.primaryKey : config.sourceKey !== undefined || singer !== undefined ? primaryKey : [];
      const tapState = singer === undefined ? undefined : withSingerBookmark(stored?.resume as JsonValue | undefined, config.singer?.tapStream ?? stream, singer, cursor);
      if (singer !== undefined && tapState === undefined) {
        throw new UsageError(`stream ${stream}: the tap's state does not hold its bookmark in a form tidemark knows; edit the tap's state with tidemark state import`);
      }
      if (pk.length !== 0 && pk.length !== pkColumns.length) {
        throw new UsageError(`stream ${stream} has a primary key of ${pkColumns.length} column(s) (${pkColumns.join(', ')}); got ${pk.length} --pk value(s)`);
      }
      const cursorValue = typed(kinds.get(config.cursor)!, cursor, `--cursor for ${config.cursor}`);
      // Without --pk the watermark sits before every row of that cursor value, so all of them are read again.
      const pkValues = pk.length ? pkColumns.map((c, i) => typed(kinds.get(c)!, pk[i]!, `--pk for ${c}`)) : [];
      const appending = await appendStreams([stream]);
      return edit(`set ${stream}`, (current) => {
        const prior = current.streams[stream];
        const wanted: Watermark = { cursor: cursorValue, pk: pkValues };
        if (appending.has(stream) && prior !== undefined && hasLoaded(prior) && movesBack(wanted, prior.watermark)) {
          throw new UsageError(
            `stream ${stream} appends its rows: moving its watermark back to ${describePosition(wanted)} from ${describePosition(prior.watermark)} would append the rows loaded since a second time; ` +
              `to load them again use tidemark state reset ${stream} (the next run rebuilds the stream) or tidemark run --full`,
          );
        }
        const next: StreamState = {
          strategy: config.strategy,
          cursorColumn: config.cursor!,
          primaryKey: pkColumns,
          ...(prior?.generation !== undefined ? { generation: prior.generation } : {}),
          // The table keeps its columns: the next run still compares the source with them.
          ...(prior?.schema !== undefined ? { schema: prior.schema } : {}),
          watermark: wanted,
          ...(tapState !== undefined ? { resume: tapState } : {}),
          updatedAt: new Date().toISOString(),
          ...keptMarks(prior),
        };
        return { ...current, streams: { ...current.streams, [stream]: next } };
      });
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
      const appending = await appendStreams(stream !== undefined ? [stream] : pipeline.streams.map((s) => s.name));
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
      const appending = await appendStreams(pipeline.streams.map((s) => s.name));
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
        const { kinds } = await columnKinds(stream);
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

/** The stream has rows in its live table (or a build under way) that a re-read from an earlier point would repeat. */
function hasLoaded(stream: StreamState): boolean {
  // A sync token (HTTP `sync:`) is stored only with rows loaded from the sync that handed it out.
  return stream.watermark !== undefined || stream.generation !== undefined || stream.build !== undefined || isSyncPosition(stream.resume);
}

/** The stream as it is, with a new generation to build at the next run: the live table stays until the swap. */
function rebuildOf(stream: StreamState): StreamState {
  const { build: _build, resume: _resume, resumeHigh: _high, ...live } = stream;
  return { ...live, build: { generation: newRunId(), rows: 0 }, updatedAt: new Date().toISOString() };
}

/**
 * True when `to` lies before `from`. No watermark is before every one; a watermark without key values (`state set`
 * without `--pk`) sits before every row of its cursor value.
 */
function movesBack(to: Watermark | undefined, from: Watermark | undefined): boolean {
  if (from === undefined) return false;
  if (to === undefined) return true;
  const byCursor = compareCanonical(to.cursor.type, to.cursor.value, from.cursor.value);
  if (byCursor !== 0) return byCursor < 0;
  if (to.pk.length === 0) return from.pk.length > 0;
  for (let i = 0; i < Math.min(to.pk.length, from.pk.length); i += 1) {
    const c = compareCanonical(to.pk[i]!.type, to.pk[i]!.value, from.pk[i]!.value);
    if (c !== 0) return c < 0;
  }
  return false;
}

function describePosition(w: Watermark | undefined): string {
  if (w === undefined) return '(none)';
  return `(${[w.cursor.value, ...w.pk.map((v) => v.value)].join(', ')})`;
}
