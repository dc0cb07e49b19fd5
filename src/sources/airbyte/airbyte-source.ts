/**
 * Any Airbyte source connector as a tidemark source. The connector's config is checked against its own spec
 * (`connectionSpecification`) before anything else runs; each read runs `read` for one stream, with a configured
 * catalog built from the stream's settings and the last committed state (stored verbatim) as `--state`. Every STATE
 * message (STREAM, GLOBAL or LEGACY) is a resume token: the records before it commit together with it, nothing
 * after it. Its `sourceStats.recordCount`, when present, must match the records received since the previous STATE.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join, basename } from 'node:path';
import type { Batch, JsonValue, OfferedStream, OpenedRead, ReadRequest, Source, StreamSpec } from '../../core/connector.js';
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

  /** The catalog that selects exactly this stream, with its sync modes, cursor and key. */
  private configuredCatalog(entry: AirbyteCatalogStream, schema: StreamSchema, incremental: boolean, write: StreamSpec['write']): string {
    if (incremental && !entry.syncModes.includes('incremental')) {
      throw new ConfigError(`stream ${entry.name}: the connector reads it only as ${entry.syncModes.join(', ') || 'full_refresh'}; set strategy: full`, { context: { stream: entry.name } });
    }
    const stream = {
      name: entry.name,
      ...(entry.namespace !== undefined ? { namespace: entry.namespace } : {}),
      json_schema: entry.jsonSchema,
      supported_sync_modes: entry.syncModes,
      source_defined_cursor: entry.sourceDefinedCursor,
      default_cursor_field: entry.defaultCursor,
      source_defined_primary_key: entry.sourceDefinedPrimaryKey,
    };
    const cursorField = incremental ? (schema.cursor !== undefined ? [schema.cursor] : entry.defaultCursor) : undefined;
    const configured = {
      stream,
      sync_mode: incremental ? 'incremental' : 'full_refresh',
      ...(cursorField !== undefined && cursorField.length ? { cursor_field: cursorField } : {}),
      destination_sync_mode: !incremental ? 'overwrite' : write !== 'append' && schema.primaryKey.length > 0 ? 'append_dedup' : 'append',
      ...(schema.primaryKey.length ? { primary_key: schema.primaryKey.map((k) => [k]) } : {}),
    };
    return stringifyExactJson({ streams: [configured] } as unknown as ExactJson);
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const stream = request.stream;
    const context = { stream: stream.name, phase: 'extract' };
    const entry = await this.entry(stream);
    const schema = this.schemaOf(stream, entry);
    const config = await this.connectorConfig();
    const files = [
      { flag: 'config', text: stringifyExactJson(config) },
      { flag: 'catalog', text: this.configuredCatalog(entry, schema, request.incremental, stream.write) },
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
    const self = this;
    return {
      schema,
      until: null,
      nullCursorRows: 0,
      predicate: `airbyte connector ${this.program} stream ${entry.name} (${request.incremental ? 'incremental' : 'full_refresh'}), ${request.resume !== undefined && request.resume !== null ? 'from its stored state' : 'without state'}`,
      bindings: [],
      // An incremental read with a cursor comes in cursor order (the protocol's checkpoint contract: a state says
      // "everything up to here"). The engine then drops the records a `>=` connector re-sends at its state's cursor
      // that a commit inside that cursor group already holds. Without a cursor the order is not known.
      ordered: schema.cursor !== undefined,
      resumable: true,
      ...(estimate !== undefined ? { estimatedRows: estimate } : {}),
      close: () => run.stop(),
      async *batches(): AsyncIterable<Batch> {
        let rows: Row[] = [];
        let since = 0;
        let failed: Extract<AirbyteMessage, { type: 'TRACE_ERROR' }> | undefined;
        async function* all(): AsyncGenerator<AirbyteMessage> {
          yield* leading;
          leading.length = 0;
          yield* messages;
        }
        for await (const message of all()) {
          switch (message.type) {
            case 'RECORD':
              if (message.stream !== entry.name) {
                throw run.failure(`sent a RECORD of stream ${JSON.stringify(message.stream)}, which the catalog did not ask for (it asked for ${entry.name}); nothing after the last STATE is committed`, false);
              }
              rows.push(recordToRow(message.data, schema, undefined));
              since += 1;
              if (rows.length >= request.batchRows) {
                yield { rows };
                rows = [];
              }
              break;
            case 'STATE':
              if (message.stream !== undefined && message.stream !== entry.name) {
                throw run.failure(`sent a STATE of stream ${JSON.stringify(message.stream)}, which the catalog did not ask for (it asked for ${entry.name}); nothing after the last STATE is committed`, false);
              }
              if (message.recordCount !== undefined && message.recordCount !== since) {
                await run.stop();
                throw new SourceError(
                  `stream ${entry.name}: the connector's ${message.kind} state counts ${message.recordCount} records since the previous state (sourceStats.recordCount), tidemark received ${since}; nothing after the previous state is committed`,
                  { context },
                );
              }
              try {
                self.checkStateSecrets(entry.name, message.resume);
              } catch (error) {
                await run.stop();
                throw error;
              }
              yield { rows, resume: message.resume };
              rows = [];
              since = 0;
              break;
            case 'LOG':
              self.logger.log(LEVELS[message.level] ?? 'info', `${self.program}: ${message.message}`);
              if (message.stack !== undefined) self.logger.log('debug', `${self.program}: ${message.stack}`);
              break;
            case 'TRACE_ERROR':
              failed ??= message;
              self.logger.log('error', `${self.program}: stream ${entry.name}: ${message.message}${message.internal !== undefined ? ` (${message.internal})` : ''}`);
              if (message.stack !== undefined) self.logger.log('debug', `${self.program}: ${message.stack}`);
              break;
            case 'TRACE_STATUS':
              self.logger.log('info', `${self.program}: stream ${message.stream || entry.name} ${message.status.toLowerCase()}`);
              break;
            case 'CONTROL_CONFIG':
              await self.updateConfig(message.config);
              break;
            default:
              break;
          }
        }
        if (failed !== undefined) {
          await run.stop();
          throw new SourceError(
            redact(`stream ${entry.name}: the connector reported an error: ${failed.message}${failed.internal !== undefined ? ` (${failed.internal})` : ''}; nothing after the last state is committed`),
            { context, ...(failed.failureType === 'transient_error' ? { retryable: true } : {}) },
          );
        }
        await run.finished();
        if (rows.length) yield { rows };
      },
    };
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

  async close(): Promise<void> {}

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
