/**
 * Any Airbyte source connector as a tidemark source. The connector's config is checked against its own spec
 * (`connectionSpecification`) before anything else runs. The streams a run loads are read in one `read` (see
 * airbyte-shared-read.ts), a single stream in its own, with a configured catalog built from the streams' settings and
 * their last committed states (stored verbatim) as `--state`. Every STATE message is a resume token: the records
 * before it commit together with it, nothing after it (in a read of several streams, a GLOBAL or LEGACY state is
 * the whole connector's and is stored for all of them at the end, see airbyte-shared-read.ts). Its
 * `sourceStats.recordCount`, when present, must match the records received since the previous STATE.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join, basename } from 'node:path';
import type { Batch, CheckProblem, FieldSelection, JsonValue, OfferedStream, OpenedRead, PlannedRead, ReadRequest, Source, StreamSpec } from '../../core/connector.js';
import { cursorLike, fieldsOf } from '../../core/cursor-candidates.js';
import { ConfigError, SourceError } from '../../core/errors.js';
import { redact, registerSecret, silentLogger, type Logger, type LogLevel } from '../../core/logger.js';
import type { Row, StreamSchema } from '../../core/types.js';
import { parseDuration } from '../../core/duration.js';
import type { AirbyteSourceConfig } from '../../config/schema.js';
import { isJsonObject, parseExactJson, stringifyExactJson, type ExactJson } from '../../shared/exact-json.js';
import { recordToRow } from '../singer/singer-messages.js';
import { catalogStreams, schemaFromCatalog, type AirbyteCatalogStream, type AirbyteMessage } from './airbyte-messages.js';
import { withColumns } from '../connector-schema.js';
import { ConnectorRun } from './airbyte-process.js';
import { secretPaths, secretValues, validateConnectorConfig } from './airbyte-spec.js';
import { SharedRead, traceFailure } from './airbyte-shared-read.js';
import { connectorState } from './airbyte-state-parts.js';

/** Where a stream's messages come from, and how its read ends or stops. */
interface MessageFeed {
  readonly messages: AsyncIterable<AirbyteMessage>;
  /** After the last message: throws when the connector failed. */
  readonly finish: () => Promise<void>;
  /** The read closes (the engine is done with it, or gave up). */
  readonly stop: () => Promise<void>;
  /** Stops the connector before a refusal is thrown (a solo read). */
  readonly stopRun?: () => Promise<void>;
  /** LOG, TRACE and CONTROL messages (a solo read handles its own). */
  readonly onOther?: (message: AirbyteMessage) => Promise<void>;
  /** A RECORD or STATE of a stream the catalog did not ask for. */
  readonly unknown: (what: string, stream: string | undefined) => Error;
}

/** Two plans of a stream's read ask for the same read: the shared read was started with the first. */
function sameRead(a: ReadRequest, b: ReadRequest): boolean {
  return a.incremental === b.incremental && JSON.stringify(a.resume ?? null) === JSON.stringify(b.resume ?? null);
}

const DEFAULT_IDLE = '10m';

const LEVELS: Record<string, LogLevel> = { FATAL: 'error', ERROR: 'error', WARN: 'warn', INFO: 'info', DEBUG: 'debug', TRACE: 'debug' };

export interface CheckResult {
  readonly status: 'SUCCEEDED' | 'FAILED';
  readonly message?: string;
}

export class AirbyteSource implements Source {
  private specified: Promise<ExactJson> | undefined;
  private catalog: Promise<AirbyteCatalogStream[]> | undefined;
  private config: Promise<ExactJson> | undefined;
  /** The run's reads, when several streams are read in one go; the shared read once the first of them opened. */
  private planned: readonly PlannedRead[] = [];
  private shared: SharedRead | undefined;
  private readonly idleMs: number;
  /** The config's `airbyte_secret` values: hidden in every message, and refused in a state. */
  private readonly secrets = new Set<string>();

  constructor(
    private readonly settings: AirbyteSourceConfig,
    private readonly logger: Logger = silentLogger,
  ) {
    this.idleMs = parseDuration(settings.idle_timeout ?? DEFAULT_IDLE) ?? 600_000;
  }

  /** Resolved from `executable` or `package` when the pipeline was loaded (src/config/api-streams.ts). */
  private get command(): readonly string[] {
    const c = this.settings.command;
    if (c === undefined) throw new ConfigError('source: an airbyte source needs command, executable or package', { context: { phase: 'connect' } });
    return typeof c === 'string' ? c.split(/\s+/).filter(Boolean) : c;
  }

  /** The connector's name for messages: the script, not the interpreter that runs it (`node main.mjs`). */
  private get program(): string {
    const interpreters = /^(node|python3?|npx|uvx?|pipx|bash|sh)$/;
    return basename(this.command.find((a) => !interpreters.test(basename(a)) && !a.startsWith('-')) ?? this.command[0]!);
  }

  /** The connector's `connectionSpecification`. */
  spec(): Promise<ExactJson> {
    return (this.specified ??= (async () => {
      const messages = await this.collect('spec', []);
      const spec = messages.find((m): m is Extract<AirbyteMessage, { type: 'SPEC' }> => m.type === 'SPEC');
      if (!spec || !isJsonObject(spec.spec)) throw new SourceError(`the connector ${this.program} spec sent no SPEC message`, { context: { phase: 'connect' } });
      return spec.spec.connectionSpecification ?? {};
    })());
  }

  /** The config, read (exact numbers kept), checked against the spec, its `airbyte_secret` values registered. */
  connectorConfig(): Promise<ExactJson> {
    if (this.config === undefined) {
      this.config = this.readConfig();
      // A refused config is refused again, with a fresh error, by every stream that asks.
      this.config.catch(() => (this.config = undefined));
    }
    return this.config;
  }

  private readConfig(): Promise<ExactJson> {
    return ((async () => {
      const spec = await this.spec();
      let config: ExactJson;
      const file = this.settings.config_file;
      if (file !== undefined) {
        try {
          config = parseExactJson(await readFile(file, 'utf8'));
        } catch (cause) {
          throw new ConfigError(`source.config_file: cannot read ${file}: ${(cause as Error).message}`, { cause });
        }
      } else config = parseExactJson(JSON.stringify(this.settings.config ?? {}));
      this.remember(secretValues(config, secretPaths(spec)));
      validateConnectorConfig(spec, config, file !== undefined ? 'source.config_file' : 'source.config');
      return config;
    })());
  }

  async check(): Promise<CheckResult> {
    const config = await this.connectorConfig();
    const messages = await this.collect('check', [{ flag: 'config', text: stringifyExactJson(config) }]);
    const status = messages.find((m): m is Extract<AirbyteMessage, { type: 'CONNECTION_STATUS' }> => m.type === 'CONNECTION_STATUS');
    if (!status) throw new SourceError(`the connector ${this.program} check sent no CONNECTION_STATUS message`, { context: { phase: 'connect' } });
    return { status: status.status === 'SUCCEEDED' ? 'SUCCEEDED' : 'FAILED', ...(status.message !== undefined ? { message: redact(status.message) } : {}) };
  }

  /** The connector runs (`spec`), its config passes the spec (a ConfigError otherwise), and its own `check` succeeds. */
  async checkConnection(): Promise<readonly CheckProblem[]> {
    let result: CheckResult;
    try {
      result = await this.check();
    } catch (error) {
      if (error instanceof ConfigError) throw error;
      return [{ key: 'source.command', message: `${(error as Error).message}; check that the connector is installed and speaks the Airbyte protocol (spec, check)` }];
    }
    if (result.status === 'SUCCEEDED') return [];
    return [{ key: 'source.config', message: `the connector's check failed: ${result.message ?? 'no message'}; fix the connector's config (source.config or source.config_file)` }];
  }

  private streams(): Promise<AirbyteCatalogStream[]> {
    return (this.catalog ??= (async () => {
      const config = await this.connectorConfig();
      const messages = await this.collect('discover', [{ flag: 'config', text: stringifyExactJson(config) }]);
      const catalog = messages.find((m): m is Extract<AirbyteMessage, { type: 'CATALOG' }> => m.type === 'CATALOG');
      if (!catalog) throw new SourceError(`the connector ${this.program} discover sent no CATALOG message`, { context: { phase: 'discover' } });
      return catalogStreams(catalog.catalog);
    })());
  }

  async offeredStreams(): Promise<OfferedStream[]> {
    return (await this.streams()).map((entry) => {
      const { columns } = schemaFromCatalog(entry.name, entry, [], undefined);
      const cursor = entry.defaultCursor.length === 1 ? [entry.defaultCursor[0]!] : [];
      return {
        name: entry.name,
        fields: fieldsOf(columns),
        modes: entry.syncModes.map((mode) => (mode === 'full_refresh' ? 'full' : mode)),
        keyCandidates: entry.sourceDefinedPrimaryKey.map((path) => [path.join('.')]),
        cursorCandidates: entry.sourceDefinedCursor ? cursor : [...new Set([...cursor, ...cursorLike(columns)])],
      };
    });
  }

  private async entry(stream: StreamSpec): Promise<AirbyteCatalogStream> {
    const streams = await this.streams();
    const entry = streams.find((s) => s.name === stream.name);
    if (!entry) {
      throw new ConfigError(`stream ${stream.name}: the connector ${this.program} has no such stream (it has ${streams.map((s) => s.name).join(', ') || 'none'})`, {
        context: { stream: stream.name, phase: 'discover' },
      });
    }
    return entry;
  }

  async readsIncrementally(stream: StreamSpec): Promise<boolean> {
    return (await this.entry(stream)).syncModes.includes('incremental');
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    return this.schemaOf(stream, await this.entry(stream));
  }

  private schemaOf(stream: StreamSpec, entry: AirbyteCatalogStream): StreamSchema {
    const schema = schemaFromCatalog(stream.name, entry, stream.primaryKey, this.cursorOf(stream, entry));
    return withColumns(schema, `the catalog of the connector ${this.program} (discover), stream ${entry.name},`);
  }

  /** The configured cursor, unless the source defines its own (then only that one is accepted). */
  private cursorOf(stream: StreamSpec, entry: AirbyteCatalogStream): string | undefined {
    if (stream.cursor !== undefined && entry.sourceDefinedCursor && entry.defaultCursor.length > 0 && entry.defaultCursor.join('.') !== stream.cursor) {
      throw new ConfigError(`streams.${stream.name}.cursor: the connector defines this stream's cursor (${entry.defaultCursor.join('.')}); drop cursor: or set it to that`, {
        context: { stream: stream.name },
      });
    }
    return stream.cursor;
  }

  /** A stream of a configured catalog: its sync modes, cursor and key. */
  private configuredStream(entry: AirbyteCatalogStream, schema: StreamSchema, incremental: boolean, spec: StreamSpec): ExactJson {
    const write = spec.write;
    if (incremental && !entry.syncModes.includes('incremental')) {
      throw new ConfigError(`stream ${entry.name}: the connector reads it only as ${entry.syncModes.join(', ') || 'full_refresh'}; set strategy: full`, { context: { stream: entry.name } });
    }
    const stream = {
      name: entry.name,
      ...(entry.namespace !== undefined ? { namespace: entry.namespace } : {}),
      json_schema: selectedSchema(entry.jsonSchema, spec.fields, [...schema.primaryKey, ...(schema.cursor !== undefined ? [schema.cursor] : []), ...entry.defaultCursor.slice(0, 1)]),
      supported_sync_modes: entry.syncModes,
      source_defined_cursor: entry.sourceDefinedCursor,
      default_cursor_field: entry.defaultCursor,
      source_defined_primary_key: entry.sourceDefinedPrimaryKey,
    };
    const cursorField = incremental ? (schema.cursor !== undefined ? [schema.cursor] : entry.defaultCursor) : undefined;
    return {
      stream,
      sync_mode: incremental ? 'incremental' : 'full_refresh',
      ...(cursorField !== undefined && cursorField.length ? { cursor_field: cursorField } : {}),
      destination_sync_mode: !incremental ? 'overwrite' : write !== 'append' && schema.primaryKey.length > 0 ? 'append_dedup' : 'append',
      ...(schema.primaryKey.length ? { primary_key: schema.primaryKey.map((k) => [k]) } : {}),
    } as unknown as ExactJson;
  }

  /**
   * The run's reads, before the first opens: streams of one connector are read in one `read` (see
   * airbyte-shared-read.ts), started when the first of them opens. A single stream keeps its own read.
   */
  readTogether(reads: readonly PlannedRead[]): void {
    this.planned = reads.length > 1 ? reads : [];
  }

  /** The whole-connector (LEGACY or GLOBAL) state the shared read ended at, for all its incremental streams. */
  sharedResume(): { readonly streams: readonly string[]; readonly resume: JsonValue } | undefined {
    return this.shared?.sharedResume();
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const planned = this.planned.find((p) => p.request.stream.name === request.stream.name);
    const joins = planned !== undefined && sameRead(planned.request, request) && (this.shared === undefined || this.shared.holds(request.stream.name));
    return joins ? this.openShared(request) : this.openSolo(request);
  }

  private async openShared(request: ReadRequest): Promise<OpenedRead> {
    const stream = request.stream;
    const entry = await this.entry(stream);
    const schema = this.schemaOf(stream, entry);
    const shared = (this.shared ??= await this.startShared());
    const messages = shared.messagesOf(stream.name);
    const origin = request.resume !== undefined && request.resume !== null ? 'from its stored state' : 'without state';
    return this.opened(request, entry, schema, `airbyte connector ${this.program} stream ${entry.name} (${request.incremental ? 'incremental' : 'full_refresh'}), one read of ${this.planned.length} streams, ${origin}`, {
      messages,
      finish: async () => undefined,
      stop: () => shared.closeStream(stream.name),
      unknown: (what, name) => new SourceError(`the connector ${this.program} sent a ${what} of stream ${JSON.stringify(name)} in the read of ${stream.name}`, { context: { stream: stream.name, phase: 'extract' } }),
    });
  }

  /** One `read` with a catalog of every planned stream, and the state they resume from together. */
  private async startShared(): Promise<SharedRead> {
    const parts: { entry: AirbyteCatalogStream; request: ReadRequest }[] = [];
    for (const { request } of this.planned) parts.push({ entry: await this.entry(request.stream), request });
    const catalog = parts.map(({ entry, request }) => this.configuredStream(entry, this.schemaOf(request.stream, entry), request.incremental, request.stream));
    const state = connectorState(this.planned.filter((p) => p.request.incremental));
    const config = await this.connectorConfig();
    const files = [
      { flag: 'config', text: stringifyExactJson(config) },
      { flag: 'catalog', text: stringifyExactJson({ streams: catalog }) },
      ...(state !== undefined ? [{ flag: 'state', text: JSON.stringify(state) }] : []),
    ];
    const signal = this.planned.find((p) => p.request.signal !== undefined)?.request.signal;
    const run = await ConnectorRun.start({ command: this.command, name: this.program, verb: 'read', files, idleMs: this.idleMs, ...(this.settings.env ? { env: this.settings.env } : {}), ...(signal ? { signal } : {}) });
    const shared = this.planned.map(({ request }) => ({ name: request.stream.name, resume: request.resume ?? null, incremental: request.incremental }));
    const names = shared.map((p) => p.name).join(', ');
    return SharedRead.start(run, shared, this.program, { other: (message) => this.handle(message, undefined), checkState: (resume) => this.checkStateSecrets(names, resume) });
  }

  private async openSolo(request: ReadRequest): Promise<OpenedRead> {
    const stream = request.stream;
    const entry = await this.entry(stream);
    const schema = this.schemaOf(stream, entry);
    const config = await this.connectorConfig();
    const files = [
      { flag: 'config', text: stringifyExactJson(config) },
      { flag: 'catalog', text: stringifyExactJson({ streams: [this.configuredStream(entry, schema, request.incremental, stream)] }) },
      ...(request.resume !== undefined && request.resume !== null ? [{ flag: 'state', text: JSON.stringify(request.resume) }] : []),
    ];
    const run = await ConnectorRun.start({ command: this.command, name: this.program, verb: 'read', files, idleMs: this.idleMs, ...(this.settings.env ? { env: this.settings.env } : {}), ...(request.signal ? { signal: request.signal } : {}) });
    const messages = run.messages();
    // Messages before the first record or state are read now: an ESTIMATE among them sizes the progress display.
    const leading: AirbyteMessage[] = [];
    let estimate: number | undefined;
    try {
      for (;;) {
        const next = await messages.next();
        if (next.done) break;
        leading.push(next.value);
        if (next.value.type === 'TRACE_ESTIMATE' && (next.value.stream === undefined || next.value.stream === entry.name) && next.value.rows !== undefined) estimate = next.value.rows;
        if (next.value.type === 'RECORD' || next.value.type === 'STATE' || leading.length > 1000) break;
      }
    } catch (error) {
      await run.stop();
      throw error;
    }
    async function* all(): AsyncGenerator<AirbyteMessage> {
      yield* leading;
      leading.length = 0;
      yield* messages;
    }
    let failed: Extract<AirbyteMessage, { type: 'TRACE_ERROR' }> | undefined;
    const origin = request.resume !== undefined && request.resume !== null ? 'from its stored state' : 'without state';
    const read = this.opened(request, entry, schema, `airbyte connector ${this.program} stream ${entry.name} (${request.incremental ? 'incremental' : 'full_refresh'}), ${origin}`, {
      messages: all(),
      onOther: (message) => {
        if (message.type === 'TRACE_ERROR') failed ??= message;
        return this.handle(message, entry.name);
      },
      finish: async () => {
        if (failed !== undefined) {
          await run.stop();
          throw traceFailure(failed, entry.name);
        }
        await run.finished();
      },
      stop: () => run.stop(),
      unknown: (what, streamName) => run.failure(`sent a ${what} of stream ${JSON.stringify(streamName)}, which the catalog did not ask for (it asked for ${entry.name}); nothing after the last STATE is committed`, false),
      stopRun: () => run.stop(),
    });
    return estimate !== undefined ? { ...read, estimatedRows: estimate } : read;
  }

  /** A read of one stream from its messages: records in batches, each STATE the resume point of what came before. */
  private opened(request: ReadRequest, entry: AirbyteCatalogStream, schema: StreamSchema, predicate: string, from: MessageFeed): OpenedRead {
    const context = { stream: entry.name, phase: 'extract' };
    const self = this;
    return {
      schema,
      until: null,
      nullCursorRows: 0,
      predicate,
      bindings: [],
      // An incremental read with a cursor comes in cursor order (the protocol's checkpoint contract: a state says
      // "everything up to here"). The engine then drops the records a `>=` connector re-sends at its state's cursor
      // that a commit inside that cursor group already holds. Without a cursor the order is not known.
      ordered: schema.cursor !== undefined,
      resumable: true,
      close: from.stop,
      async *batches(): AsyncIterable<Batch> {
        let rows: Row[] = [];
        let since = 0;
        const stop = async (): Promise<void> => {
          await from.stopRun?.();
        };
        for await (const message of from.messages) {
          switch (message.type) {
            case 'RECORD':
              if (message.stream !== entry.name) throw from.unknown('RECORD', message.stream);
              rows.push(recordToRow(message.data, schema, undefined));
              since += 1;
              if (rows.length >= request.batchRows) {
                yield { rows };
                rows = [];
              }
              break;
            case 'STATE':
              if (message.stream !== undefined && message.stream !== entry.name) throw from.unknown('STATE', message.stream);
              if (message.recordCount !== undefined && message.recordCount !== since) {
                await stop();
                throw new SourceError(
                  `stream ${entry.name}: the connector's ${message.kind} state counts ${message.recordCount} records since the previous state (sourceStats.recordCount), tidemark received ${since}; nothing after the previous state is committed`,
                  { context },
                );
              }
              try {
                self.checkStateSecrets(entry.name, message.resume);
              } catch (error) {
                await stop();
                throw error;
              }
              yield { rows, resume: message.resume };
              rows = [];
              since = 0;
              break;
            default:
              await from.onOther?.(message);
              break;
          }
        }
        await from.finish();
        if (rows.length) yield { rows };
      },
    };
  }

  /** A LOG, TRACE or CONTROL message, whichever stream's read it came in. */
  private async handle(message: AirbyteMessage, stream: string | undefined): Promise<void> {
    switch (message.type) {
      case 'LOG':
        this.logger.log(LEVELS[message.level] ?? 'info', `${this.program}: ${message.message}`);
        if (message.stack !== undefined) this.logger.log('debug', `${this.program}: ${message.stack}`);
        break;
      case 'TRACE_ERROR':
        this.logger.log('error', `${this.program}: ${stream !== undefined ? `stream ${stream}: ` : ''}${message.message}${message.internal !== undefined ? ` (${message.internal})` : ''}`);
        if (message.stack !== undefined) this.logger.log('debug', `${this.program}: ${message.stack}`);
        break;
      case 'TRACE_STATUS':
        this.logger.log('info', `${this.program}: stream ${message.stream || stream} ${message.status.toLowerCase()}`);
        break;
      case 'CONTROL_CONFIG':
        await this.updateConfig(message.config);
        break;
      default:
        break;
    }
  }

  /**
   * A CONTROL connector_config message: the connector refreshed a credential. Kept for the rest of this run, and
   * written back to `config_file` atomically (a temp file renamed over it) so the next run starts with it.
   */
  private async updateConfig(next: ExactJson): Promise<void> {
    const spec = await this.spec();
    this.remember(secretValues(next, secretPaths(spec)));
    this.config = Promise.resolve(next);
    const file = this.settings.config_file;
    if (file === undefined) {
      this.logger.log('warn', `${this.program} updated its config (CONTROL connector_config); it is used for this run only: an inline config is not rewritten (use source.config_file to keep it)`);
      return;
    }
    const temp = join(dirname(file), `.${basename(file)}.${process.pid}.tmp`);
    await writeFile(temp, `${stringifyExactJson(next)}\n`, { mode: 0o600 });
    await rename(temp, file);
    this.logger.log('warn', `${this.program} updated its config (CONTROL connector_config); written to ${file}`);
  }

  private remember(values: readonly string[]): void {
    for (const value of values) {
      registerSecret(value);
      this.secrets.add(value);
    }
  }

  /** A state is stored and shown (`state show`, exports): one that carries a secret is refused, not kept. */
  private checkStateSecrets(stream: string, resume: JsonValue): void {
    const text = JSON.stringify(resume);
    if ([...this.secrets].some((secret) => secret.length >= 4 && text.includes(secret))) {
      throw new SourceError(`stream ${stream}: the connector's state holds a value its spec marks airbyte_secret; tidemark does not store it (nothing after the previous state is committed)`, {
        context: { stream, phase: 'extract' },
      });
    }
  }

  async close(): Promise<void> {
    await this.shared?.close();
    this.shared = undefined;
  }

  /** Runs a short command to its end and returns its messages (LOG lines go to the log). */
  private async collect(verb: 'spec' | 'check' | 'discover', files: { flag: string; text: string }[]): Promise<AirbyteMessage[]> {
    const run = await ConnectorRun.start({ command: this.command, name: this.program, verb, files, idleMs: this.idleMs, ...(this.settings.env ? { env: this.settings.env } : {}) });
    const out: AirbyteMessage[] = [];
    try {
      for await (const message of run.messages()) {
        if (message.type === 'LOG') this.logger.log(LEVELS[message.level] ?? 'info', `${this.program}: ${message.message}`);
        else if (message.type === 'TRACE_ERROR') throw run.failure(`reported an error: ${message.message}`, false);
        else out.push(message);
      }
      await run.finished();
      return out;
    } finally {
      await run.stop();
    }
  }
}

/** The stored state of a stream, as a JsonValue the next read passes back. */
export type AirbyteResume = JsonValue;

/**
 * The stream's JSON schema as the configured catalog sends it: with `columns:` / `exclude:`, only the selected
 * top-level properties (the key and cursor always), so a connector that honours field selection fetches no more.
 */
function selectedSchema(jsonSchema: ExactJson, fields: FieldSelection | undefined, kept: readonly string[]): ExactJson {
  if (fields === undefined || !isJsonObject(jsonSchema) || !isJsonObject(jsonSchema.properties)) return jsonSchema;
  const needed = new Set(kept);
  const keep = (name: string): boolean => needed.has(name) || ('only' in fields ? fields.only.includes(name) : !fields.except.includes(name));
  const properties = Object.fromEntries(Object.entries(jsonSchema.properties).filter(([name]) => keep(name)));
  const required = Array.isArray(jsonSchema.required) ? { required: jsonSchema.required.filter((n) => typeof n === 'string' && keep(n)) } : {};
  return { ...jsonSchema, properties, ...required } as ExactJson;
}
