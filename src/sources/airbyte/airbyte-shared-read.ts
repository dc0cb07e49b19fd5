/**
 * One `read` of an Airbyte connector for all the streams a run loads, as Airbyte's platform and PyAirbyte run it. The
 * engine loads streams one after another, so the stream loaded first reads the connector live, and the messages of
 * the others wait in spool files (bounded memory) until their turn, in the order the connector sent them.
 *
 * A STREAM state is its stream's own resume point. A LEGACY or GLOBAL state is the whole connector's: no single
 * stream's commit can hold it (another stream's records before it may not be committed yet), so each stream sees it
 * as a checkpoint at its own stored state (its data commits, its resume point stays), and the last one is stored for
 * all streams together once every one of them committed (`sharedResume`).
 */
import type { JsonValue } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import { parseExactJson, stringifyExactJson } from '../../shared/exact-json.js';
import { SpoolFiles } from '../../shared/spool-files.js';
import type { AirbyteMessage } from './airbyte-messages.js';
import type { ConnectorRun } from './airbyte-process.js';
import { redact } from '../../core/logger.js';

/** A connector's TRACE error, as the read's failure: its data is kept up to the last state. */
export function traceFailure(failed: Extract<AirbyteMessage, { type: 'TRACE_ERROR' }>, stream?: string): SourceError {
  return new SourceError(
    redact(`${stream !== undefined ? `stream ${stream}: ` : ''}the connector reported an error: ${failed.message}${failed.internal !== undefined ? ` (${failed.internal})` : ''}; nothing after the last state is committed`),
    { context: { phase: 'extract' }, ...(failed.failureType === 'transient_error' ? { retryable: true } : {}) },
  );
}

type Record_ = Extract<AirbyteMessage, { type: 'RECORD' }>;
type State = Extract<AirbyteMessage, { type: 'STATE' }>;
/** What a stream's read gets: its records, and its states (a shared one already turned into its own checkpoint). */
export type StreamMessage = Record_ | State;

/** A stream of the shared read: the state it resumes from, and whether its turn has come. */
export interface SharedPart {
  readonly name: string;
  /** The stream's stored state, which a whole-connector state checkpoints it at; null when it has none. */
  readonly resume: JsonValue;
  /** Read incrementally: only these streams store the whole-connector state. */
  readonly incremental: boolean;
}

export interface SharedHooks {
  /** LOG, TRACE and CONTROL messages, handled once for the whole read. */
  readonly other: (message: AirbyteMessage) => Promise<void>;
  /** Refuses a whole-connector state that may not be stored (one holding a secret). */
  readonly checkState: (resume: JsonValue) => void;
}

export class SharedRead {
  private readonly opened = new Set<string>();
  private readonly states: State[] = [];
  private live: string | undefined;
  private ended = false;
  private failure: unknown;
  private shared: JsonValue | undefined;
  private traced: Extract<AirbyteMessage, { type: 'TRACE_ERROR' }> | undefined;
  /** Records of every stream since the previous state, which a whole-connector state's recordCount counts. */
  private since = 0;

  private readonly messages: AsyncGenerator<AirbyteMessage>;

  private constructor(
    private readonly run: ConnectorRun,
    private readonly spool: SpoolFiles,
    private readonly parts: ReadonlyMap<string, SharedPart>,
    private readonly program: string,
    private readonly hooks: SharedHooks,
  ) {
    this.messages = run.messages();
  }

  static async start(run: ConnectorRun, parts: readonly SharedPart[], program: string, hooks: SharedHooks): Promise<SharedRead> {
    const spool = await SpoolFiles.create('tidemark-airbyte-spool-');
    return new SharedRead(run, spool, new Map(parts.map((p) => [p.name, p])), program, hooks);
  }

  /** Whether this read still holds the stream's messages (its turn has not come yet). */
  holds(stream: string): boolean {
    return this.parts.has(stream) && !this.opened.has(stream);
  }

  /** The whole-connector state to store for the incremental streams, once the connector ended well. */
  sharedResume(): { readonly streams: readonly string[]; readonly resume: JsonValue } | undefined {
    if (!this.ended || this.failure !== undefined || this.shared === undefined) return undefined;
    return { streams: [...this.parts.values()].filter((p) => p.incremental).map((p) => p.name), resume: this.shared };
  }

  /** The stream's messages: live from the connector for the first stream read, from its spool for the others. */
  messagesOf(stream: string): AsyncGenerator<StreamMessage> {
    this.opened.add(stream);
    if (this.live === undefined) {
      this.live = stream;
      return this.fromConnector(stream);
    }
    return this.fromSpool(stream);
  }

  /**
   * The stream's read closes. When the live stream ends early (its load failed), the connector is read on to its end,
   * so the streams after it still get their messages.
   */
  async closeStream(stream: string): Promise<void> {
    if (stream !== this.live || this.ended) return;
    try {
      for (let next = await this.messages.next(); !next.done; next = await this.messages.next()) await this.route(next.value, undefined);
      await this.end();
    } catch (error) {
      this.ended = true;
      this.failure = error;
    }
  }

  async close(): Promise<void> {
    await this.run.stop();
    await this.spool.close();
  }

  private async *fromConnector(stream: string): AsyncGenerator<StreamMessage> {
    try {
      // Pulled one by one, not with for-await: a stream that stops early must not close the connector's output.
      for (let next = await this.messages.next(); !next.done; next = await this.messages.next()) {
        const mine = await this.route(next.value, stream);
        if (mine !== undefined) yield mine;
      }
      await this.end();
    } catch (error) {
      this.ended = true;
      this.failure = error;
      throw error;
    }
  }

  /** The connector's output ended: it failed (a TRACE error, an exit code) or the read is complete. */
  private async end(): Promise<void> {
    if (this.traced !== undefined) {
      await this.run.stop();
      throw traceFailure(this.traced);
    }
    await this.run.finished();
    this.ended = true;
  }

  /** The message for the live stream, if it is one; the other streams' go to their spools. */
  private async route(message: AirbyteMessage, live: string | undefined): Promise<StreamMessage | undefined> {
    if (message.type === 'RECORD') {
      this.known(message.stream, 'RECORD');
      this.since += 1;
      if (message.stream === live) return message;
      if (this.holds(message.stream)) await this.spool.append(message.stream, `R${stringifyExactJson(message.data)}`);
      return undefined;
    }
    if (message.type !== 'STATE') {
      if (message.type === 'TRACE_ERROR') this.traced ??= message;
      await this.hooks.other(message);
      return undefined;
    }
    const count = message.recordCount;
    const records = this.since;
    this.since = 0;
    if (message.kind === 'STREAM') {
      this.known(message.stream, 'STATE');
      return this.put(message.stream!, message, live);
    }
    if (count !== undefined && count !== records) {
      throw new SourceError(
        `the connector ${this.program}'s ${message.kind} state counts ${count} records since the previous state (sourceStats.recordCount), tidemark received ${records}; nothing after the previous state is committed`,
        { context: { phase: 'extract' } },
      );
    }
    this.hooks.checkState(message.resume);
    this.shared = message.resume;
    let mine: StreamMessage | undefined;
    for (const part of this.parts.values()) {
      // The stream checkpoints here at its own stored state; recordCount was checked above, for all streams.
      const own: State = { type: 'STATE', kind: message.kind, resume: part.resume };
      const routed = await this.put(part.name, own, live);
      if (routed !== undefined) mine = routed;
    }
    return mine;
  }

  private async put(stream: string, state: State, live: string | undefined): Promise<State | undefined> {
    if (stream === live) return state;
    if (this.holds(stream)) {
      this.states.push(state);
      await this.spool.append(stream, `S${this.states.length - 1}`);
    }
    return undefined;
  }

  private known(stream: string | undefined, what: string): void {
    if (stream !== undefined && this.parts.has(stream)) return;
    const asked = [...this.parts.keys()].join(', ');
    throw this.run.failure(`sent a ${what} of stream ${JSON.stringify(stream)}, which the catalog did not ask for (it asked for ${asked}); nothing after the last STATE is committed`, false);
  }

  private async *fromSpool(stream: string): AsyncGenerator<StreamMessage> {
    if (!this.ended) {
      throw new SourceError(`the connector ${this.program} reads all streams in one read, which was stopped while stream ${this.live} loaded; stream ${stream} keeps what it committed before`, {
        context: { phase: 'extract' },
      });
    }
    for await (const line of this.spool.lines(stream)) {
      if (line.startsWith('S')) yield this.states[Number(line.slice(1))]!;
      else yield { type: 'RECORD', stream, data: parseExactJson(line.slice(1)) };
    }
    await this.spool.clear(stream);
    if (this.failure !== undefined) throw this.failure;
  }
}
