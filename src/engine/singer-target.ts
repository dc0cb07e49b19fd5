/**
 * `tidemark target`: Singer messages from stdin, loaded with the same commit rule as every run. Records are
 * spooled per stream; at a checkpoint (a STATE after `checkpoint_rows` records, and the end of input) each stream's
 * records commit together with that STATE, and only then is the STATE written to stdout (the Singer contract).
 */
import { runStart } from '../core/run-clock.js';
import type { Destination, Lease } from '../core/connector.js';
import { ConfigError, SourceError, TidemarkError, withContext } from '../core/errors.js';
import { newRunId } from '../core/ids.js';
import { silentLogger, type Logger } from '../core/logger.js';
import type { PipelineState, StreamResult } from '../core/types.js';
import { DEFAULT_CHECKPOINT_ROWS, type PipelineConfig, type StreamConfig } from '../config/load.js';
import { openSingerSpool } from '../registry/index.js';
import { emptyState } from './run.js';
import { loadStream } from './stream-load.js';
import { TargetTotals, withTargetSession } from './target-session.js';

export interface TargetOptions {
  /** The Singer message stream (stdin). */
  readonly input: AsyncIterable<Buffer | string>;
  /** Receives each committed STATE value as one JSON line (stdout). */
  readonly emitState: (line: string) => void | Promise<void>;
  readonly logger?: Logger;
}

export interface TargetResult {
  readonly pipeline: string;
  readonly run_id: string;
  readonly ok: boolean;
  readonly streams: readonly StreamResult[];
  /** How many STATE messages were committed and passed on. */
  readonly states_emitted: number;
}

const BATCH_ROWS = 10_000;

export async function runTarget(pipeline: PipelineConfig, options: TargetOptions): Promise<TargetResult> {
  const logger = options.logger ?? silentLogger;
  for (const s of pipeline.streams) {
    if (s.strategy !== 'incremental') {
      throw new ConfigError(`stream ${s.name}: a Singer target appends or merges what the tap sends; strategy ${s.strategy} does not apply (remove it)`, {
        context: { pipeline: pipeline.name, stream: s.name },
      });
    }
  }
  const runId = newRunId();
  const startedAt = runStart();
  return withTargetSession(pipeline, logger, (destination, lease) => new TargetRun(pipeline, runId, startedAt, destination, lease, options).run());
}

class TargetRun {
  private state: PipelineState;
  private readonly totals: TargetTotals;
  private readonly configs = new Map<string, StreamConfig>();
  private readonly checkpointRows: number;
  private statesEmitted = 0;

  constructor(
    private readonly pipeline: PipelineConfig,
    private readonly runId: string,
    private readonly startedAt: string,
    private readonly destination: Destination,
    private readonly lease: Lease,
    private readonly options: TargetOptions,
  ) {
    this.totals = new TargetTotals(startedAt);
    this.state = emptyState(pipeline.name);
    this.checkpointRows = Math.min(DEFAULT_CHECKPOINT_ROWS, ...pipeline.streams.map((s) => s.checkpointRows));
  }

  async run(): Promise<TargetResult> {
    await this.destination.state.closeInterruptedRuns(this.pipeline.name);
    this.state = (await this.destination.state.load(this.pipeline.name)) ?? emptyState(this.pipeline.name);
    const spool = await openSingerSpool();
    try {
      let latest: { value: unknown; text: string } | undefined;
      let committed = true;
      for await (const { message, line } of spool.messages(this.options.input)) {
        if (message.type === 'STATE') {
          latest = { value: message.value, text: JSON.stringify(message.value) };
          committed = false;
          if (spool.pendingRows() >= this.checkpointRows) {
            await this.checkpoint(spool, latest.value);
            committed = true;
          }
          continue;
        }
        if (message.type === 'SCHEMA') this.configFor(message.stream, message.keyProperties);
        await spool.add(message, line);
      }
      if (spool.pendingRows() > 0 || (latest !== undefined && !committed)) await this.checkpoint(spool, latest?.value);
    } finally {
      await spool.close();
    }
    return { pipeline: this.pipeline.name, run_id: this.runId, ok: true, streams: this.totals.results((stream) => ({ watermark: this.state.streams[stream]?.watermark ?? null, full: false })), states_emitted: this.statesEmitted };
  }

  /** Commits every stream's spooled records with the STATE that follows them, then passes that STATE on. */
  private async checkpoint(spool: Awaited<ReturnType<typeof openSingerSpool>>, value: unknown): Promise<void> {
    spool.setCheckpoint(value as never);
    let tapStreams = spool.pendingStreams();
    // A STATE with no records before it is still stored (in the first stream), so tidemark's copy is never behind stdout.
    if (tapStreams.length === 0 && value !== undefined && spool.streams().length > 0) tapStreams = [spool.streams()[0]!];
    for (const tapStream of tapStreams) {
      const stream = this.configFor(tapStream, spool.schemaMessage(tapStream)?.keyProperties ?? []);
      try {
        const outcome = await loadStream(
          { pipeline: this.pipeline.name, runId: this.runId, startedAt: this.startedAt, source: spool, destination: this.destination, lease: this.lease, full: false },
          stream,
          this.state,
        );
        this.state = outcome.state;
        this.totals.add(stream.name, outcome.result);
      } catch (error) {
        if (error instanceof TidemarkError) throw withContext(error, { pipeline: this.pipeline.name, stream: stream.name }, 'destination');
        throw error;
      }
    }
    await spool.clear();
    if (value !== undefined) {
      await this.options.emitState(JSON.stringify(value));
      this.statesEmitted += 1;
    }
  }

  /** The configured stream for a tap stream, or one derived from its SCHEMA (key properties → merge). */
  private configFor(tapStream: string, keyProperties: readonly string[]): StreamConfig {
    const known = this.configs.get(tapStream);
    if (known) return known;
    const configured = this.pipeline.streams.find((s) => (s.singer?.tapStream ?? s.name) === tapStream);
    let config: StreamConfig;
    if (configured) config = configured;
    else {
      const name = tapStream.replace(/[^A-Za-z0-9_.-]/g, '_').replace(/^[.-]/, '_').replace(/\.\.+/g, '_');
      if (name === '') throw new SourceError(`stream name ${JSON.stringify(tapStream)} is not usable as a table name; configure it with name and tap_stream`);
      config = {
        name,
        singer: { tapStream },
        primaryKey: [...keyProperties],
        strategy: 'incremental',
        write: keyProperties.length ? 'merge' : 'append',
        onNullCursor: 'include',
        onReject: 'warn',
        checkpointRows: this.checkpointRows,
        batchRows: BATCH_ROWS,
        onChange: 'reload',
        onMissing: 'keep',
      };
    }
    this.configs.set(tapStream, config);
    return config;
  }

}
