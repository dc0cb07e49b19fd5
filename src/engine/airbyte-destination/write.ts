/**
 * `tidemark airbyte-destination write`: Airbyte RECORD and STATE messages from stdin, loaded with tidemark's commit
 * rule. Records are spooled per stream; at a checkpoint (a STATE once `checkpoint_rows` records wait, and the end of
 * input) each stream's records commit together with the identities of the STATE messages they precede, and only
 * then are those STATE messages written to stdout. Records after the last STATE are never committed.
 *
 * A restarted write (after a kill) is sent the records after the last STATE the platform received, which may be
 * before the last one committed. Each stream's commit stores the states it covered, so when the first STATE of the
 * new input is one of them, that stream's records up to the last of them are known to be committed and are
 * dropped: nothing is lost and nothing loads twice.
 */
import type { Destination, JsonValue, Lease } from '../../core/connector.js';
import { ConfigError, SourceError, TidemarkError, withContext } from '../../core/errors.js';
import { newRunId } from '../../core/ids.js';
import { silentLogger, type Logger } from '../../core/logger.js';
import type { PipelineState, StreamResult, Watermark } from '../../core/types.js';
import type { StreamConfig } from '../../config/load.js';
import { readLines } from '../../shared/lines.js';
import { emptyState } from '../run.js';
import { loadStream } from '../stream-load.js';
import { TargetTotals, withTargetSession } from '../target-session.js';
import type { AirbyteDestinationConfig } from './config.js';
import { parseAirbyteMessage, stateEcho, type AirbyteInput, type CatalogStream } from './protocol.js';
import { ResendMark } from './resend-mark.js';
import { AirbyteSpool } from './spool.js';

export interface AirbyteWriteOptions {
  /** The messages (stdin). */
  readonly input: AsyncIterable<Buffer | string>;
  /** Writes one line to stdout; resolves once it is written (a STATE is echoed only after its commit). */
  readonly emit: (line: string) => Promise<void>;
  readonly logger?: Logger;
}

export interface AirbyteWriteResult {
  readonly pipeline: string;
  readonly runId: string;
  readonly streams: readonly StreamResult[];
  /** STATE messages committed and echoed. */
  readonly states_emitted: number;
  /** Records a restarted write was sent again and dropped, since they were committed before. */
  readonly records_resent: number;
  /** Records after the last STATE, not committed. */
  readonly records_uncommitted: number;
}

type StateInput = Extract<AirbyteInput, { type: 'STATE' }>;

/** What a stream's commits store as its resume position: the identities of the STATE messages they covered. */
interface CommittedStates {
  readonly airbyte: readonly string[];
  /** The sync (`sync_id`) they belong to, where the platform names it. */
  readonly sync?: string;
  /** An incremental append stream's committed edge (resend-mark.ts). */
  readonly mark?: Watermark;
}

function committedStates(resume: unknown): readonly string[] {
  const list = (resume as Partial<CommittedStates> | undefined)?.airbyte;
  return Array.isArray(list) ? list.filter((s): s is string => typeof s === 'string') : [];
}

const BATCH_ROWS = 10_000;

export async function runAirbyteWrite(config: AirbyteDestinationConfig, catalog: readonly CatalogStream[], options: AirbyteWriteOptions): Promise<AirbyteWriteResult> {
  const logger = options.logger ?? silentLogger;
  const runId = newRunId();
  const startedAt = new Date().toISOString();
  return withTargetSession(config.pipeline, logger, (destination, lease) => new AirbyteWrite(config, catalog, runId, startedAt, destination, lease, options, logger).run());
}

class AirbyteWrite {
  private state: PipelineState;
  private readonly totals: TargetTotals;
  private readonly pipelineName: string;
  private readonly configs = new Map<string, StreamConfig>();
  private readonly byStream = new Map<string, CatalogStream>();
  /** STATE messages received since the last checkpoint, each with the records that came before it. */
  private pendingStates: { readonly state: StateInput; readonly records: number }[] = [];
  private recordsSinceState = 0;
  /** Set at the first STATE: per stream, how many more STATE messages its resent (committed) records run up to. */
  private skip: Map<string, number> | undefined;
  private statesEmitted = 0;
  private resent = 0;
  /** Incremental append streams with a cursor and a key: the edge below which a record is a resend. */
  private readonly marks = new Map<string, ResendMark>();
  /** Streams a STREAM state named, and streams the source reported INCOMPLETE (TRACE STREAM_STATUS). */
  private readonly stated = new Set<string>();
  private readonly incomplete = new Set<string>();

  constructor(
    private readonly config: AirbyteDestinationConfig,
    private readonly catalog: readonly CatalogStream[],
    private readonly runId: string,
    private readonly startedAt: string,
    private readonly destination: Destination,
    private readonly lease: Lease,
    private readonly options: AirbyteWriteOptions,
    private readonly logger: Logger,
  ) {
    this.totals = new TargetTotals(startedAt);
    this.pipelineName = config.pipeline.name;
    this.state = emptyState(this.pipelineName);
    for (const s of catalog) {
      this.byStream.set(streamKey(s.stream, s.namespace), s);
      this.configs.set(s.table, streamConfig(s, config.checkpointRows));
    }
  }

  async run(): Promise<AirbyteWriteResult> {
    for (const s of this.catalog) {
      const write = this.configs.get(s.table)!.write;
      if (!this.destination.capabilities.writes.includes(write)) {
        throw new ConfigError(`stream ${s.stream}: destination_sync_mode ${s.mode} needs write ${write}, which a ${this.config.pipeline.destination.type} destination does not do (it does ${this.destination.capabilities.writes.join(', ')})`, {
          context: { pipeline: this.pipelineName, stream: s.stream },
        });
      }
    }
    await this.destination.state.closeInterruptedRuns(this.pipelineName);
    this.state = (await this.destination.state.load(this.pipelineName)) ?? emptyState(this.pipelineName);
    for (const s of this.catalog) {
      const mark = ResendMark.of(s, this.state.streams[s.table]?.resume);
      if (mark !== undefined) this.marks.set(s.table, mark);
    }
    const spool = await AirbyteSpool.create(this.catalog);
    let uncommitted = 0;
    try {
      let line = 0;
      for await (const text of readLines(this.options.input, 'stdin')) {
        line += 1;
        const message = parseAirbyteMessage(text, line);
        if (message === undefined) continue;
        if (message.type === 'RECORD') await this.record(spool, message, line);
        else if (message.type === 'STATE') await this.stateMessage(spool, message);
        else if (message.type === 'STATUS') this.status(message);
        else this.logger.log('debug', `stdin line ${line}: ${message.name} message passed over`);
      }
      if (this.skip === undefined) await this.decide(spool, undefined);
      this.commitStateless(spool);
      uncommitted = spool.trailingRows();
      if (uncommitted > 0) {
        this.logger.log('warn', `${uncommitted} record${uncommitted === 1 ? '' : 's'} after the last STATE message ${uncommitted === 1 ? 'was' : 'were'} not committed; a resumed sync sends them again`);
      }
      // A clean end publishes the overwrite streams' new generations; input cut short leaves them for the resume.
      await this.checkpoint(spool, uncommitted === 0);
      if (uncommitted === 0) await this.finish(spool);
    } finally {
      await spool.close();
    }
    return {
      pipeline: this.pipelineName,
      runId: this.runId,
      streams: this.totals.results((stream) => ({ watermark: null, full: this.configs.get(stream)?.strategy === 'full' })),
      states_emitted: this.statesEmitted,
      records_resent: this.resent,
      records_uncommitted: uncommitted,
    };
  }

  private async record(spool: AirbyteSpool, message: Extract<AirbyteInput, { type: 'RECORD' }>, line: number): Promise<void> {
    const stream = this.byStream.get(streamKey(message.stream, message.namespace)) ?? this.uniqueByName(message.stream);
    if (stream === undefined) {
      const named = message.namespace !== undefined ? `${message.namespace}.${message.stream}` : message.stream;
      throw new SourceError(`stdin line ${line}: RECORD of stream ${named}, which is not in the configured catalog`, { context: { pipeline: this.pipelineName, phase: 'extract', at: `line ${line}` } });
    }
    this.recordsSinceState += 1;
    if ((this.skip?.get(stream.table) ?? 0) > 0 || this.marks.get(stream.table)?.admits(message.data) === false) {
      this.resent += 1;
      return;
    }
    await spool.add(stream.table, message.data);
  }

  /** A record without a namespace (or with another one) matches the only catalog stream of its name. */
  private uniqueByName(name: string): CatalogStream | undefined {
    const named = this.catalog.filter((s) => s.stream === name);
    return named.length === 1 ? named[0] : undefined;
  }

  private async stateMessage(spool: AirbyteSpool, state: StateInput): Promise<void> {
    if (this.skip === undefined) await this.decide(spool, state.identity);
    else for (const [table, n] of this.skip) if (n > 0) this.skip.set(table, n - 1);
    if (state.stream !== undefined) {
      const named = this.byStream.get(streamKey(state.stream.name, state.stream.namespace)) ?? this.uniqueByName(state.stream.name);
      if (named !== undefined) this.stated.add(named.table);
    }
    spool.markState();
    for (const mark of this.marks.values()) mark.markState();
    this.pendingStates.push({ state, records: this.recordsSinceState });
    this.recordsSinceState = 0;
    if (spool.committableRows() === 0) await this.echo();
    else if (spool.committableRows() >= this.config.checkpointRows) await this.checkpoint(spool, false);
  }

  /**
   * At the first STATE of the input: a stream whose last commit covered this state was sent records it already
   * holds (the platform resends from the last state it received): those spooled are dropped, and so are the ones up
   * to the last state of that commit. Any other stream loads what it is sent. An overwrite stream whose previous write
   * was cut short goes on with the generation it was building (the platform's next attempt resends from the last
   * state it received), unless the catalog names another sync than the one that began it: that one starts over.
   */
  private async decide(spool: AirbyteSpool, first: string | undefined): Promise<void> {
    this.skip = new Map();
    for (const stream of this.catalog) {
      const prior = this.state.streams[stream.table];
      const covered = committedStates(prior?.resume);
      const at = first === undefined ? -1 : covered.indexOf(first);
      if (at >= 0) {
        const dropped = await spool.discard(stream.table);
        this.resent += dropped;
        this.skip.set(stream.table, covered.length - 1 - at);
        if (dropped > 0 || covered.length - 1 - at > 0) this.logger.log('info', `stream ${stream.stream}: resumed after a committed state; records already committed are dropped`);
      } else if (stream.mode === 'overwrite' && prior?.build !== undefined && stream.syncId !== undefined && (prior.resume as Partial<CommittedStates> | undefined)?.sync !== stream.syncId) {
        const { build: _build, resume: _resume, ...rest } = prior;
        this.state = { ...this.state, streams: { ...this.state.streams, [stream.table]: rest } };
        this.logger.log('info', `stream ${stream.stream}: the unfinished generation of an earlier sync is started over`);
      }
    }
  }

  /** Commits every stream's records before the latest STATE with the states they precede, then echoes those states. */
  private async checkpoint(spool: AirbyteSpool, final: boolean): Promise<void> {
    const identities = this.pendingStates.map((p) => p.state.identity);
    spool.setCheckpoint((table) => (identities.length > 0 ? this.position(table, identities, final) : undefined));
    const tables = spool.committableStreams();
    if (final) for (const s of this.catalog) if (s.mode === 'overwrite' && !tables.includes(s.table) && this.publishes(s.table)) tables.push(s.table);
    for (const table of tables) await this.load(spool, table, !final);
    await spool.clear();
    await this.echo();
  }

  /** `complete`: every record of this write is committed with this position (the clean end of the input). */
  private position(table: string, identities: readonly string[], complete: boolean): JsonValue {
    const syncId = this.catalog.find((s) => s.table === table)?.syncId;
    const mark = this.marks.get(table)?.committed(complete);
    const position: CommittedStates = { airbyte: [...identities], ...(syncId !== undefined ? { sync: syncId } : {}), ...(mark !== undefined ? { mark } : {}) };
    // A Watermark is plain JSON (strings and lists), stored in state like any other.
    return position as unknown as JsonValue;
  }

  /**
   * Whether the end of this write swaps in an overwrite stream's new generation although no records of it are left to
   * load: a generation is being built, or the stream had none (it becomes empty). Not when this write is a resend
   * of a sync whose swap already committed (its records were all dropped as committed).
   */
  private publishes(table: string): boolean {
    return this.state.streams[table]?.build !== undefined || !this.skip?.has(table);
  }

  /**
   * After a clean end, every stream's stored states are cleared: the next sync's STATE messages may repeat this one's
   * (a full refresh sends the same empty state every time) and must not be taken for a resend. An append stream's
   * edge becomes the highest record of the write, all of which is committed now.
   */
  private async finish(spool: AirbyteSpool): Promise<void> {
    spool.setCheckpoint((table) => this.position(table, [], true));
    for (const s of this.catalog) {
      const stored = this.state.streams[s.table]?.resume as CommittedStates | undefined;
      const mark = this.marks.get(s.table)?.committed(true);
      if (committedStates(stored).length === 0 && JSON.stringify(stored?.mark) === JSON.stringify(mark)) continue;
      // Only the position moves: an overwrite stream's live generation stays as it is, no new one is begun.
      const config = this.configs.get(s.table)!;
      await this.load(spool, s.table, false, s.mode === 'overwrite' ? { ...config, strategy: 'incremental', write: 'append' } : config);
    }
  }

  private async load(spool: AirbyteSpool, table: string, openEnded: boolean, stream: StreamConfig = this.configs.get(table)!): Promise<void> {
    // Records arrive in the source's order, not the cursor's: no stored watermark may drop a record as already loaded.
    const prior = this.state.streams[table];
    if (prior?.watermark !== undefined || prior?.resumeHigh !== undefined) {
      const { watermark: _w, resumeHigh: _h, ...rest } = prior;
      this.state = { ...this.state, streams: { ...this.state.streams, [table]: rest } };
    }
    try {
      const outcome = await loadStream(
        { pipeline: this.pipelineName, runId: this.runId, startedAt: this.startedAt, source: spool, destination: this.destination, lease: this.lease, full: false, openEnded },
        stream,
        this.state,
      );
      this.state = outcome.state;
      this.totals.add(table, outcome.result);
      if (outcome.result.rowsRejected > 0) {
        this.logger.log('warn', `stream ${table}: ${outcome.result.rowsRejected} record(s) the destination cannot hold exactly were kept as rejects (tidemark rejects)`);
      }
    } catch (error) {
      if (error instanceof TidemarkError) throw withContext(error, { pipeline: this.pipelineName, stream: table }, 'destination');
      throw error;
    }
  }

  private status(message: Extract<AirbyteInput, { type: 'STATUS' }>): void {
    const stream = this.byStream.get(streamKey(message.stream, message.namespace)) ?? this.uniqueByName(message.stream);
    if (stream !== undefined && message.status === 'INCOMPLETE') this.incomplete.add(stream.table);
  }

  /**
   * At the end of the input, a full-refresh stream that never had a STATE of its own (older CDKs send none) commits
   * its records, as Airbyte's platform does at the end of a sync — unless the source reported the stream INCOMPLETE,
   * or records of other streams are left after their last STATE (the input was cut short: the sync is resent).
   */
  private commitStateless(spool: AirbyteSpool): void {
    const stateless = this.catalog.filter((s) => !s.incremental && !this.stated.has(s.table) && !this.incomplete.has(s.table));
    const waiting = stateless.reduce((n, s) => n + spool.trailingRows(s.table), 0);
    if (waiting === 0 || waiting !== spool.trailingRows()) return;
    for (const s of stateless) spool.markState(s.table);
    this.logger.log('info', `${stateless.map((s) => s.stream).join(', ')}: no STATE message; the records commit at the end of the input`);
  }

  private async echo(): Promise<void> {
    for (const pending of this.pendingStates) {
      await this.options.emit(stateEcho(pending.state.message, pending.records));
      this.statesEmitted += 1;
    }
    this.pendingStates = [];
  }

}

function streamKey(name: string, namespace: string | undefined): string {
  return `${namespace ?? ''}\u0000${name}`;
}

/** How tidemark loads a catalog stream: append, merge (append_dedup) or a new generation swapped in (overwrite). */
function streamConfig(stream: CatalogStream, checkpointRows: number): StreamConfig {
  const common = {
    name: stream.table,
    primaryKey: stream.schema.primaryKey,
    onNullCursor: 'include',
    onReject: 'warn',
    checkpointRows,
    batchRows: BATCH_ROWS,
    onChange: 'reload',
    onMissing: 'keep',
  } as const;
  switch (stream.mode) {
    case 'append':
      return { ...common, strategy: 'incremental', write: 'append' };
    case 'append_dedup':
      return { ...common, strategy: 'incremental', write: 'merge' };
    case 'overwrite':
      return { ...common, strategy: 'full', write: 'replace' };
  }
}
