/**
 * Keeping a separate state store (`state: {type: file | sqlite | postgres | …}`) in step with the destination.
 *
 * The destination is the authority: every commit writes its state there in the same transaction as the data, so
 * its state always describes the rows it holds. The store gets the same state right after each commit; it is a
 * cache, reconciled against the destination at run start:
 *
 * - store and destination at the same version and state: in step;
 * - store behind (a crash between the data commit and the store save, or a lost store): the store is repaired from
 *   the destination, so nothing is read or loaded twice;
 * - store ahead by edits alone (`state migrate --force` into it, written outside a run) on top of the state the
 *   destination holds: the store's state is adopted and written into the destination;
 * - store ahead by commits the destination does not have (the destination was deleted, or restored from a backup),
 *   or holding a different state at the same version: the destination's state wins, loudly. The run then reads
 *   exactly what the destination lacks (from the destination's watermark; everything when it holds no state), and
 *   both sides move to one version above the store's, so versions never repeat;
 * - store torn, empty or corrupt: repaired from the destination — never taken for "no state".
 */
import type { CommitRequest, Destination, LoadInfo, LoadTransaction, NativeScan, SaveMeta, StateStore } from '../core/connector.js';
import { ConflictError, StateError, errorMessage } from '../core/errors.js';
import { failpoint } from '../core/failpoints.js';
import { silentLogger, type Logger } from '../core/logger.js';
import type { ColumnType, PipelineState, PipelineStateVersion, Row, StreamState } from '../core/types.js';
import type { PipelineConfig } from '../config/load.js';
import { createStateStore, openDestination, type CreateStateStoreOptions, type OpenDestinationOptions } from '../registry/index.js';
import { CorruptStateError, type ExternalStateStore } from '../state/state-store.js';
import { singerDocumentOf } from './singer-document.js';
import { singerDocumentEdit } from './singer-document-edits.js';

/** What opening this pipeline's separate store needs from the pipeline: how its Singer document is written. */
export function storeOptions(pipeline: PipelineConfig): CreateStateStoreOptions {
  return { renderSingerDocument: (state) => singerDocumentOf(pipeline, state) };
}

/** A stream whose state differs between the store and the destination, each side described in words. */
export interface StateDifference {
  readonly stream: string;
  readonly store: string;
  readonly destination: string;
}

export function describeDifference(d: StateDifference): string {
  return `stream ${d.stream}: store ${d.store} vs destination ${d.destination}`;
}

export type ReconcileAction = 'fresh' | 'in-step' | 'seeded-store' | 'repaired-store' | 'caught-up-store' | 'adopted-store' | 'store-ahead';

export interface Reconciled {
  /** The state both sides hold now (version 0 and no streams when neither had any). */
  readonly state: PipelineState;
  readonly action: ReconcileAction;
  /** `store-ahead`: the streams whose state in the store differs from the destination's (the state used). */
  readonly differences?: readonly StateDifference[];
  /** `store-ahead`: the one-line warning the run logs. */
  readonly warning?: string;
}

const meta = (reason: string): SaveMeta => ({ runId: null, reason });

/** What reconciling reads and writes: the store's and the destination's state, nothing else. */
type ReconcilingStore = Pick<ExternalStateStore, 'load' | 'save' | 'repair' | 'description' | 'history'>;

/** Brings the store and the destination to the same state and version; see the module comment for the rules. */
export async function reconcile(pipeline: string, store: ReconcilingStore, destination: Pick<StateStore, 'load' | 'save'>, logger: Logger): Promise<Reconciled> {
  const recorded = await destination.load(pipeline);
  let cached: PipelineState | undefined;
  try {
    cached = await store.load(pipeline);
  } catch (error) {
    if (!(error instanceof CorruptStateError)) throw error;
    if (recorded === undefined) {
      throw new StateError(
        `${error.message}; the destination holds no state to repair it from (restore one with tidemark state rollback, or start over with tidemark state reset)`,
        { context: { pipeline, phase: 'state' }, cause: error },
      );
    }
    await store.repair(recorded, meta(`repaired from the destination: ${error.message}`));
    logger.log('warn', `pipeline ${pipeline}: ${error.message}; repaired ${store.description} from the destination (version ${recorded.version})`);
    return { state: recorded, action: 'repaired-store' };
  }
  if (cached === undefined && recorded === undefined) return { state: { pipeline, version: 0, streams: {} }, action: 'fresh' };
  if (cached === undefined) {
    await store.save(recorded!, undefined, meta('seeded from the destination'));
    return { state: recorded!, action: 'seeded-store' };
  }
  if (recorded !== undefined && cached.version < recorded.version) {
    await store.save(recorded, cached.version, meta(`caught up with the destination (was version ${cached.version})`));
    logger.log('warn', `pipeline ${pipeline}: ${store.description} was behind the destination (version ${cached.version} < ${recorded.version}); caught it up`);
    return { state: recorded, action: 'caught-up-store' };
  }
  if (recorded !== undefined && cached.version === recorded.version && sameStreams(cached, recorded)) return { state: cached, action: 'in-step' };
  if (recorded !== undefined && cached.version > recorded.version && (await aheadByEditsOnly(store, pipeline, recorded, cached.version))) {
    await destination.save(cached, recorded.version, meta(`adopted from ${store.description}`));
    logger.log('info', `pipeline ${pipeline}: using state version ${cached.version} of ${store.description}, edited outside a run (destination had ${recorded.version})`);
    return { state: cached, action: 'adopted-store' };
  }
  return destinationWins(pipeline, store, destination, recorded, cached, logger);
}

/**
 * The store names commits the destination does not have (or disagrees with it at one version): the destination's
 * state (none at all when it was deleted) is written to both sides as the version after the store's.
 */
async function destinationWins(
  pipeline: string,
  store: ReconcilingStore,
  destination: Pick<StateStore, 'load' | 'save'>,
  recorded: PipelineState | undefined,
  cached: PipelineState,
  logger: Logger,
): Promise<Reconciled> {
  const next: PipelineState = { pipeline, version: cached.version + 1, streams: recorded?.streams ?? {} };
  const differences = streamDifferences(cached, next);
  const had = recorded === undefined ? 'holds no state' : `is at version ${recorded.version}`;
  const warning =
    `pipeline ${pipeline}: ${store.description} is ahead of the destination (store version ${cached.version}, the destination ${had}): ` +
    `the destination lacks what the store says was loaded, so this run starts from the destination's state and reloads what it lacks` +
    ` (${differences.map(describeDifference).join('; ') || 'no stream differs'}); both now hold it as version ${next.version}. ` +
    `To reload everything instead: tidemark run --full; to start over: tidemark state reset`;
  await destination.save(next, recorded?.version, meta(`the destination's state (version ${recorded?.version ?? 'none'}) won over ${store.description} (version ${cached.version})`));
  await store.save(next, cached.version, meta(`replaced by the destination's state (version ${recorded?.version ?? 'none'}): the store was ahead of it`));
  logger.log('warn', warning);
  return { state: next, action: 'store-ahead', differences, warning };
}

/**
 * True when every store version above the destination's was written outside a run (an edit) on top of the state the
 * destination holds. A version written by a run (or one missing from the store's history) names a commit the
 * destination may not have.
 */
async function aheadByEditsOnly(store: ReconcilingStore, pipeline: string, recorded: PipelineState, storeVersion: number): Promise<boolean> {
  const history = new Map<number, PipelineStateVersion>((await store.history(pipeline)).map((v) => [v.version, v]));
  const base = history.get(recorded.version);
  if (base === undefined || !sameStreams(base.state, recorded)) return false;
  for (let v = recorded.version + 1; v <= storeVersion; v += 1) {
    const entry = history.get(v);
    if (entry === undefined || entry.runId !== null) return false;
  }
  return true;
}

/** Key order differs between stores (Postgres jsonb), so states compare by canonical JSON. */
function sameStreams(a: PipelineState, b: PipelineState): boolean {
  return canonicalJson(a.streams) === canonicalJson(b.streams);
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    return `{${entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The streams whose store state differs from the state used. */
export function streamDifferences(store: PipelineState, used: PipelineState): StateDifference[] {
  const names = [...new Set([...Object.keys(store.streams), ...Object.keys(used.streams)])].sort();
  const out: StateDifference[] = [];
  for (const name of names) {
    const a = store.streams[name];
    const b = used.streams[name];
    if (a !== undefined && b !== undefined && canonicalJson(a) === canonicalJson(b)) continue;
    out.push({ stream: name, store: describeStream(a), destination: describeStream(b) });
  }
  return out;
}

function describeStream(s: StreamState | undefined): string {
  if (s === undefined) return 'no state';
  if (s.watermark === undefined) return s.build ? `building generation ${s.build.generation}` : 'no watermark';
  const pk = s.watermark.pk.length ? `, ${s.watermark.pk.map((v) => v.value).join(', ')}` : '';
  return `watermark (${s.watermark.cursor.value}${pk})`;
}

/**
 * Opens the pipeline's destination; with a separate state store, reconciles the two and returns the destination
 * wrapped so that every commit also saves its state to the store. Closing it closes both.
 */
export async function openPipelineDestination(pipeline: PipelineConfig, logger: Logger, options: OpenDestinationOptions = {}): Promise<Destination> {
  const destination = await openDestination(pipeline.destination, options);
  if (pipeline.state === 'destination') return destination;
  const store = await reconciledStore(pipeline, destination, logger);
  return new MirroredDestination(destination, store.store, store.state.version, logger);
}

/**
 * The state the next run will start from, without writing anything (`tidemark plan`, `tidemark state show`):
 * `reconcile` run against read-only views of the store and the destination, so they and a run can never disagree
 * on the rules. `differences` says where the store's state differs from the one used.
 */
export async function plannedState(pipeline: PipelineConfig, destination: Pick<StateStore, 'load'>): Promise<Reconciled> {
  const empty: PipelineState = { pipeline: pipeline.name, version: 0, streams: {} };
  if (pipeline.state === 'destination') return { state: (await destination.load(pipeline.name)) ?? empty, action: 'in-step' };
  const store = await createStateStore(pipeline.state, storeOptions(pipeline));
  try {
    const unchanged = async (): Promise<void> => undefined;
    const reconciled = await reconcile(
      pipeline.name,
      { load: (p) => store.load(p), save: unchanged, repair: unchanged, description: store.description, history: (p) => store.history(p) },
      { load: (p) => destination.load(p), save: unchanged },
      silentLogger,
    );
    return await withPendingEdit(pipeline, reconciled, store);
  } finally {
    await store.close();
  }
}

/** The pipeline's state, reconciled, for edits outside a run (`tidemark state set|reset|rollback|import`). */
export interface PipelineStateHandle {
  readonly state: PipelineState;
  /** Compare-and-set on `state.version`: the destination (the record) first, then the store. */
  save(next: PipelineState, meta: SaveMeta): Promise<void>;
  close(): Promise<void>;
}

export async function openPipelineState(pipeline: PipelineConfig, logger: Logger): Promise<PipelineStateHandle> {
  const destination = await openDestination(pipeline.destination);
  if (pipeline.state === 'destination') {
    const state = (await destination.state.load(pipeline.name).catch(async (e: unknown) => {
      await destination.close();
      throw e;
    })) ?? { pipeline: pipeline.name, version: 0, streams: {} };
    return {
      state,
      save: (next, m) => destination.state.save(next, state.version === 0 ? undefined : state.version, m),
      close: () => destination.close(),
    };
  }
  const { store, state } = await reconciledStore(pipeline, destination, logger);
  const expected = state.version === 0 ? undefined : state.version;
  return {
    state,
    async save(next, m) {
      await destination.state.save(next, expected, m);
      await store.save(next, expected, m);
    },
    async close() {
      try {
        await store.close();
      } finally {
        await destination.close();
      }
    },
  };
}

async function reconciledStore(pipeline: PipelineConfig, destination: Destination, logger: Logger): Promise<{ store: ExternalStateStore; state: PipelineState }> {
  let store: ExternalStateStore | undefined;
  try {
    if (pipeline.state === 'destination') throw new Error('reconciledStore needs a separate state store');
    store = await createStateStore(pipeline.state, storeOptions(pipeline));
    const { state } = await reconcile(pipeline.name, store, destination.state, logger);
    return { store, state: await adoptDocumentEdit(pipeline, state, store, destination, logger) };
  } catch (error) {
    await store?.close().catch(() => undefined);
    await destination.close().catch(() => undefined);
    throw error;
  }
}

/** What the next run will make of a hand edit of the store's Singer document, said in `warning` (nothing is written). */
async function withPendingEdit(pipeline: PipelineConfig, reconciled: Reconciled, store: ExternalStateStore): Promise<Reconciled> {
  const said = (text: string) => (reconciled.warning !== undefined ? `${reconciled.warning}; ${text}` : text);
  try {
    const edit = await singerDocumentEdit(pipeline, reconciled.state, store);
    if (edit === undefined) return reconciled;
    return { ...reconciled, state: { ...edit.state, version: reconciled.state.version + 1 }, warning: said(`the next run adopts the ${edit.reason}`) };
  } catch (error) {
    if (!(error instanceof StateError)) throw error;
    return { ...reconciled, warning: said(`the next run stops: ${error.message}`) };
  }
}

/**
 * A hand edit of the store's Singer document (see singer-document-edits.ts), adopted as a version of its own written
 * like a `tidemark state set` (the destination first, then the store), or refused with a StateError. Runs under the
 * pipeline's lease, as reconciling does.
 */
async function adoptDocumentEdit(pipeline: PipelineConfig, state: PipelineState, store: ExternalStateStore, destination: Destination, logger: Logger): Promise<PipelineState> {
  const edit = await singerDocumentEdit(pipeline, state, store);
  if (edit === undefined) return state;
  const next: PipelineState = { pipeline: pipeline.name, version: state.version + 1, streams: edit.state.streams };
  const expected = state.version === 0 ? undefined : state.version;
  const m = meta(edit.reason);
  await destination.state.save(next, expected, m);
  store.editableDocument?.settle(pipeline.name, edit.copy);
  await store.save(next, expected, m);
  logger.log('info', `pipeline ${pipeline.name}: adopted the ${edit.reason} (state version ${next.version})`);
  return next;
}

/** The destination, with each committed state also saved to the store; the destination alone decides success. */
class MirroredDestination implements Destination {
  readonly capabilities: Destination['capabilities'];
  readonly state: StateStore;
  readonly ledger?: Destination['ledger'];
  /** Set when a save to the store failed: the store is left for the next run's reconciliation to repair. */
  private stale = false;

  constructor(
    private readonly inner: Destination,
    private readonly store: ExternalStateStore,
    private storeVersion: number,
    private readonly logger: Logger,
  ) {
    this.capabilities = inner.capabilities;
    const records = inner.state;
    // A state saved outside a load (a run that moved nothing records its run marks) reaches the store too.
    this.state = {
      load: (p) => records.load(p),
      save: async (next, expected, m) => {
        await records.save(next, expected, m);
        await this.mirror(next, m.runId);
      },
      history: (p) => records.history(p),
      runs: (p, limit) => records.runs(p, limit),
      closeInterruptedRuns: (p) => records.closeInterruptedRuns(p),
      recordFailure: (r) => records.recordFailure(r),
      ...(records.settleRun !== undefined ? { settleRun: records.settleRun.bind(records) } : {}),
      rejects: (p, limit, stream) => records.rejects(p, limit, stream),
      close: () => records.close(),
    };
    if (inner.ledger !== undefined) this.ledger = inner.ledger;
  }

  async begin(load: LoadInfo): Promise<LoadTransaction> {
    const txn = await this.inner.begin(load);
    const mirrored: LoadTransaction = {
      write: (rows: readonly Row[]) => txn.write(rows),
      commit: async (request: CommitRequest) => {
        await txn.commit(request);
        await this.mirror(request.state, load.runId);
      },
      rollback: () => txn.rollback(),
    };
    if (txn.writeColumns !== undefined) mirrored.writeColumns = txn.writeColumns.bind(txn);
    if (txn.writeScan !== undefined) {
      const writeScan = txn.writeScan.bind(txn);
      return { ...mirrored, writeScan: (scan: NativeScan) => writeScan(scan) };
    }
    return mirrored;
  }

  private async mirror(next: PipelineState, runId: string | null): Promise<void> {
    if (this.stale) return;
    await failpoint('state.before_store_save');
    try {
      await this.store.save(next, this.storeVersion === 0 ? undefined : this.storeVersion, { runId, reason: 'run' });
      this.storeVersion = next.version;
    } catch (error) {
      // The data and its state are committed in the destination; the store catches up at the next run.
      this.stale = true;
      const what = error instanceof ConflictError ? 'moved underneath this run' : 'could not be written';
      this.logger.log('warn', `${this.store.description} ${what} (${errorMessage(error)}); it is repaired from the destination at the next run`);
    }
  }

  rejectReason(...args: Parameters<Destination['rejectReason']>): string | undefined {
    return this.inner.rejectReason(...args);
  }

  mayReject(type: ColumnType): boolean {
    return this.inner.mayReject?.(type) ?? true;
  }

  async fenceToken(lease: string): Promise<number> {
    return (await this.inner.fenceToken?.(lease)) ?? 0;
  }

  async cutOffOlderHolders(pipeline: string, token: number): Promise<readonly string[]> {
    return (await this.inner.cutOffOlderHolders?.(pipeline, token)) ?? [];
  }

  dropBuild(stream: string): Promise<void> {
    return this.inner.dropBuild(stream);
  }

  async close(): Promise<void> {
    try {
      await this.store.close();
    } finally {
      await this.inner.close();
    }
  }
}
