/**
 * Any Singer tap as a source. Each read runs the tap as a child process for one stream, with the tap's own state
 * (stored verbatim by tidemark) passed as `--state`. Its stdout is read line by line; every STATE message becomes a
 * resume token, so the records before it and the state commit together. The config goes to a private temp file.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Batch, CheckProblem, JsonValue, OfferedStream, OpenedRead, ReadRequest, SingerStreamSpec, Source, StreamSpec } from '../../core/connector.js';
import { cursorLike, fieldsOf } from '../../core/cursor-candidates.js';
import { ConfigError, SourceError } from '../../core/errors.js';
import { redact } from '../../core/logger.js';
import type { Row, StreamSchema } from '../../core/types.js';
import type { SingerSourceConfig } from '../../config/schema.js';
import { isJsonObject, parseExactJson, toPlainJson, type ExactJson } from '../../shared/exact-json.js';
import { parseMessage, readLines, recordToRow, schemaFromSinger, singerBookmark, type SingerMessage } from './singer-messages.js';
import { withColumns } from '../connector-schema.js';

/** How much of the tap's stderr is kept to show when it fails. */
const STDERR_TAIL_BYTES = 8 * 1024;
const STDERR_TAIL_LINES = 20;

interface TapRun {
  readonly messages: AsyncGenerator<SingerMessage>;
  /** Resolves when the tap exited cleanly; rejects with its stderr when it did not. */
  finished(): Promise<void>;
  stop(): Promise<void>;
}

interface CatalogEntry {
  readonly schema: ExactJson;
  readonly keyProperties: readonly string[];
  /** The catalog's `replication-key`, as a SCHEMA message's `bookmark_properties`. */
  readonly bookmarkProperties: readonly string[];
  /** Fields the catalog deselects (`selected: false` on their breadcrumb). */
  readonly deselected: ReadonlySet<string>;
}

export class SingerSource implements Source {
  // Discovering would run the tap once more; its SCHEMA message names the key at the start of every read.
  readonly keysWhileReading = true;
  /**
   * Per stream, the schema a SCHEMA message grew it to in the middle of an earlier read of this run: the read
   * opened again after it keeps those columns, whichever SCHEMA the tap starts with.
   */
  private readonly grown = new Map<string, StreamSchema>();
  constructor(private readonly config: SingerSourceConfig) {}

  /** The tap's executable starts and answers `--discover` with a catalog. */
  async checkConnection(): Promise<readonly CheckProblem[]> {
    try {
      await this.discoveredCatalog();
      return [];
    } catch (error) {
      if (error instanceof ConfigError) throw error;
      return [{ key: 'source.command', message: `${(error as Error).message}; check that the tap is installed (on PATH or by its full path) and that its config is right` }];
    }
  }

  /** The stream's tap stream is in the tap's catalog (the configured one, else what `--discover` printed). */
  async checkStream(stream: StreamSpec): Promise<readonly CheckProblem[]> {
    const spec = singerSpec(stream);
    if (spec.columns) return [];
    const entry = (await this.catalogEntry(spec.tapStream)) ?? (await this.discoverEntry(spec.tapStream));
    if (entry !== undefined) return [];
    return [{ key: 'tap_stream', message: `the tap has no stream ${spec.tapStream} in its catalog; name one of the tap's streams (tidemark discover lists them)` }];
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    const spec = singerSpec(stream);
    if (spec.columns) return schemaFromSinger(stream.name, undefined, spec.columns, stream.primaryKey, stream.cursor);
    const entry = (await this.catalogEntry(spec.tapStream)) ?? (await this.discoverEntry(spec.tapStream));
    if (!entry) throw new SourceError(`the tap has no stream ${spec.tapStream} in its catalog`, { context: { stream: stream.name, phase: 'discover' } });
    return schemaFromSinger(stream.name, entry, undefined, stream.primaryKey, stream.cursor);
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const stream = request.stream;
    const spec = singerSpec(stream);
    const context = { stream: stream.name, phase: 'extract' };
    const known = spec.columns ? undefined : await this.catalogEntry(spec.tapStream);
    // A catalog selects and may name the key; the fields and, where the catalog has none, the key come from the
    // tap's own SCHEMA message, so a catalog written for selection never drops a field or the tap's key.
    let schema: StreamSchema | undefined = spec.columns ? schemaFromSinger(stream.name, undefined, spec.columns, stream.primaryKey, stream.cursor) : undefined;
    let run: TapRun | undefined;
    const leading: SingerMessage[] = [];
    const start = async (): Promise<TapRun> => (run ??= await this.start(spec.tapStream, request.resume, request.signal));
    if (schema === undefined) {
      // The columns come from the tap's SCHEMA message; everything read before it is replayed by batches().
      const tap = await start();
      for (;;) {
        const next = await tap.messages.next();
        if (next.done) break;
        leading.push(next.value);
        if (next.value.type === 'SCHEMA' && next.value.stream === spec.tapStream) {
          schema = schemaFromSinger(stream.name, withCatalog(next.value, known), undefined, stream.primaryKey, stream.cursor);
          break;
        }
        if (next.value.type === 'RECORD' && next.value.stream === spec.tapStream) {
          throw new SourceError(`the tap sent a RECORD of ${spec.tapStream} before its SCHEMA`, { context });
        }
        if (leading.length > 10_000) leading.splice(0, leading.length - 1, ...leading.filter((m) => m.type === 'STATE').slice(-1));
      }
      schema ??= schemaFromSinger(stream.name, known, undefined, stream.primaryKey, stream.cursor);
      schema = withColumnsOf(schema, this.grown.get(stream.name));
    }
    const finalSchema = withColumns(schema, known ? `source.catalog (tap stream ${spec.tapStream})` : `the tap's SCHEMA message for ${spec.tapStream}`);
    // Only a schema the tap's own SCHEMA messages give can grow (narrowed by the catalog); declared columns are what
    // the user chose.
    const grows = !spec.columns;
    const grown = this.grown;
    const program = this.program();
    return {
      schema: finalSchema,
      until: null,
      nullCursorRows: 0,
      predicate: `singer tap ${program} stream ${spec.tapStream}, ${request.resume !== undefined ? 'from its stored state' : 'without state (full sync)'}`,
      bindings: [],
      // An incremental tap sends its records in the order of its replication key (the stream's cursor).
      ordered: finalSchema.cursor !== undefined,
      resumable: true,
      claims: { bookmark: (token) => singerBookmark(token, spec.tapStream, finalSchema.cursor) },
      close: async () => {
        await run?.stop();
      },
      async *batches(): AsyncIterable<Batch> {
        const tap = await start();
        let rows: Row[] = [];
        async function* all(): AsyncGenerator<SingerMessage> {
          yield* leading;
          leading.length = 0;
          yield* tap.messages;
        }
        for await (const message of all()) {
          if (message.type === 'RECORD' && message.stream === spec.tapStream) {
            rows.push(recordToRow(message.record, finalSchema, spec.columns));
            if (rows.length >= request.batchRows) {
              yield { rows };
              rows = [];
            }
          } else if (message.type === 'SCHEMA' && message.stream === spec.tapStream && grows) {
            const next = withColumnsOf(finalSchema, schemaFromSinger(stream.name, withCatalog(message, known), undefined, stream.primaryKey, stream.cursor));
            const added = next.columns.slice(finalSchema.columns.length).map((c) => c.name);
            if (added.length > 0) {
              grown.set(stream.name, next);
              // The rows since the last STATE are dropped with the read; the tap sends them again from that STATE.
              yield { rows: [], schemaGrew: `the tap's SCHEMA message added column${added.length > 1 ? 's' : ''} ${added.join(', ')}` };
              return;
            }
          } else if (message.type === 'STATE') {
            yield { rows, resume: message.value };
            rows = [];
          }
        }
        await tap.finished();
        if (rows.length) yield { rows };
      },
    };
  }

  async close(): Promise<void> {}

  private program(): string {
    const command = this.command();
    return command[0]!;
  }

  private command(): readonly string[] {
    const command = this.config.command;
    if (command === undefined) {
      throw new ConfigError('source.command: a singer source needs the tap to run (or pipe a tap into `tidemark target`)', { context: { phase: 'connect' } });
    }
    return typeof command === 'string' ? command.split(/\s+/).filter(Boolean) : command;
  }

  private async tapConfig(dir: string): Promise<string[]> {
    const config = this.config.config;
    if (config === undefined) return [];
    if (typeof config === 'string') return ['--config', config];
    const file = join(dir, 'config.json');
    await writeFile(file, JSON.stringify(config), { mode: 0o600 });
    return ['--config', file];
  }

  private async readCatalog(): Promise<ExactJson | undefined> {
    const catalog = this.config.catalog;
    if (catalog === undefined) return undefined;
    if (typeof catalog !== 'string') return parseExactJson(JSON.stringify(catalog));
    try {
      return parseExactJson(await readFile(catalog, 'utf8'));
    } catch (cause) {
      throw new ConfigError(`source.catalog: cannot read ${catalog}: ${(cause as Error).message}`, { cause });
    }
  }

  private async catalogEntry(tapStream: string): Promise<CatalogEntry | undefined> {
    return entryOf(await this.readCatalog(), tapStream);
  }

  /** Every stream of the tap's catalog: the one in `source.catalog`, else the tap's `--discover`. */
  async offeredStreams(): Promise<OfferedStream[]> {
    const catalog = (await this.readCatalog()) ?? (await this.discoveredCatalog());
    const ids = isJsonObject(catalog) && Array.isArray(catalog.streams) ? (catalog.streams as ExactJson[]).flatMap((e) => (isJsonObject(e) ? [e.tap_stream_id ?? e.stream] : [])) : [];
    return ids.flatMap((id) => {
      const entry = typeof id === 'string' ? entryOf(catalog, id) : undefined;
      if (entry === undefined) return [];
      const { columns } = schemaFromSinger(id as string, entry, undefined, [], undefined);
      return [
        {
          name: id as string,
          fields: fieldsOf(columns),
          // A tap keeps its own bookmarks: tidemark loads every tap stream incrementally by them, or in full.
          modes: ['incremental', 'full'],
          keyCandidates: entry.keyProperties.length ? [entry.keyProperties] : [],
          cursorCandidates: entry.bookmarkProperties.length ? [...entry.bookmarkProperties] : cursorLike(columns),
        },
      ];
    });
  }

  private async discoverEntry(tapStream: string): Promise<CatalogEntry | undefined> {
    return entryOf(await this.discoveredCatalog(), tapStream);
  }

  /** Run once per source: a check, then each stream's discover, ask the tap once. */
  private discovered: Promise<ExactJson> | undefined;

  private discoveredCatalog(): Promise<ExactJson> {
    if (this.discovered === undefined) {
      this.discovered = this.runDiscover();
      this.discovered.catch(() => (this.discovered = undefined));
    }
    return this.discovered;
  }

  private async runDiscover(): Promise<ExactJson> {
    const dir = await mkdtemp(join(tmpdir(), 'tidemark-singer-'));
    try {
      const command = this.command();
      const args = [...command.slice(1), ...(await this.tapConfig(dir)), '--discover'];
      const child = spawn(command[0]!, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...this.config.env } });
      const stderr = new Tail();
      child.stderr!.on('data', (d: Buffer) => stderr.push(d));
      const exited = exitOf(child);
      let text = '';
      for await (const chunk of child.stdout!) text += (chunk as Buffer).toString('utf8');
      const exit = await exited;
      if (exit.code !== 0) throw tapFailure(command[0]!, exit, stderr, '--discover');
      return parseExactJson(text);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** A catalog that selects exactly this stream, so the tap reads nothing it would only throw away. */
  private async selectingCatalog(dir: string, tapStream: string): Promise<string[]> {
    const catalog = await this.readCatalog();
    if (catalog === undefined) return [];
    const plain = toPlainJson(catalog);
    if (isJsonObject(catalog) && Array.isArray((plain as { streams?: unknown }).streams)) {
      for (const entry of (plain as { streams: Record<string, unknown>[] }).streams) {
        const selected = entry.tap_stream_id === tapStream || (entry.tap_stream_id === undefined && entry.stream === tapStream);
        entry.selected = selected;
        const metadata = Array.isArray(entry.metadata) ? (entry.metadata as { breadcrumb?: unknown; metadata?: Record<string, unknown> }[]) : [];
        const top = metadata.find((m) => Array.isArray(m.breadcrumb) && m.breadcrumb.length === 0);
        if (top) top.metadata = { ...top.metadata, selected };
        else metadata.push({ breadcrumb: [], metadata: { selected } });
        entry.metadata = metadata;
      }
    }
    const file = join(dir, 'catalog.json');
    await writeFile(file, JSON.stringify(plain), { mode: 0o600 });
    return ['--catalog', file];
  }

  private async start(tapStream: string, state: JsonValue | undefined, signal: AbortSignal | undefined): Promise<TapRun> {
    const command = this.command();
    const dir = await mkdtemp(join(tmpdir(), 'tidemark-singer-'));
    let child: ChildProcess;
    try {
      const args = [...command.slice(1), ...(await this.tapConfig(dir)), ...(await this.selectingCatalog(dir, tapStream))];
      if (state !== undefined && state !== null) {
        const file = join(dir, 'state.json');
        await writeFile(file, JSON.stringify(state), { mode: 0o600 });
        args.push('--state', file);
      }
      child = spawn(command[0]!, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...this.config.env }, ...(signal ? { signal } : {}) });
    } catch (error) {
      await rm(dir, { recursive: true, force: true });
      throw error;
    }
    const stderr = new Tail();
    child.stderr!.on('data', (d: Buffer) => stderr.push(d));
    const exited = exitOf(child);
    let cleaned: Promise<void> | undefined;
    const cleanup = (): Promise<void> => (cleaned ??= rm(dir, { recursive: true, force: true }));
    void exited.then(cleanup, cleanup);
    const what = `the tap ${command[0]}`;
    async function* messages(): AsyncGenerator<SingerMessage> {
      let lineNumber = 0;
      try {
        for await (const line of readLines(child.stdout!, what)) {
          lineNumber += 1;
          const message = parseMessage(line, what, lineNumber);
          if (message) yield message;
        }
      } catch (error) {
        // The broken line names itself; a tap that then died (of EPIPE once nothing reads it) is reported with it.
        const exit = await Promise.race([exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 2000))]);
        if (exit && (exit.code !== 0 || exit.signal !== null)) throw tapFailure(command[0]!, exit, stderr, '', error instanceof SourceError ? error.message : undefined);
        throw error;
      }
    }
    return {
      messages: messages(),
      async finished() {
        const exit = await exited;
        if (exit.code !== 0 || exit.signal !== null) throw tapFailure(command[0]!, exit, stderr);
      },
      async stop() {
        // Output nobody reads keeps the tap's stdout open, and the child's 'close' waits for it: with nothing else
        // pending, Node would end the process right here, silently and with exit code 0.
        child.stdout!.destroy();
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGTERM');
          await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        }
        await exited.catch(() => undefined);
        await cleanup();
      },
    };
  }
}

function singerSpec(stream: StreamSpec): SingerStreamSpec {
  return stream.singer ?? { tapStream: stream.name };
}

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly error?: Error;
}

export function exitOf(child: ChildProcess): Promise<Exit> {
  return new Promise((resolve) => {
    child.once('error', (error) => resolve({ code: null, signal: null, error }));
    child.once('close', (code, signal) => resolve({ code, signal }));
  });
}

function tapFailure(program: string, exit: Exit, stderr: Tail, mode = '', line?: string): SourceError {
  const how = exit.error
    ? `could not be started (${(exit.error as NodeJS.ErrnoException).code ?? exit.error.message})`
    : exit.signal !== null
      ? `was killed by ${exit.signal}`
      : `exited with code ${exit.code}`;
  const tail = stderr.lines();
  const shown = tail.length ? `; its stderr ended with:\n  ${tail.map((l) => redact(l)).join('\n  ')}` : '; it wrote nothing to stderr';
  const what = line !== undefined ? `${line}; then it ${how}` : `the tap ${program}${mode ? ` ${mode}` : ''} ${how}`;
  return new SourceError(`${what}${shown}`, { context: { phase: 'extract' }, retryable: line === undefined && exit.signal !== null });
}

/** The last few kilobytes of a stream, for error messages. */
export class Tail {
  private text = '';
  push(chunk: Buffer): void {
    this.text = (this.text + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
  }
  lines(): string[] {
    return this.text.split('\n').map((l) => l.trimEnd()).filter(Boolean).slice(-STDERR_TAIL_LINES);
  }
}

function entryOf(catalog: ExactJson | undefined, tapStream: string): CatalogEntry | undefined {
  if (!isJsonObject(catalog) || !Array.isArray(catalog.streams)) return undefined;
  for (const entry of catalog.streams as ExactJson[]) {
    if (!isJsonObject(entry)) continue;
    const id = typeof entry.tap_stream_id === 'string' ? entry.tap_stream_id : entry.stream;
    if (id !== tapStream) continue;
    let keys: string[] = Array.isArray(entry.key_properties) ? entry.key_properties.filter((k): k is string => typeof k === 'string') : [];
    let bookmark: string[] = [];
    const deselected = new Set<string>();
    if (Array.isArray(entry.metadata)) {
      for (const m of entry.metadata as ExactJson[]) {
        if (!isJsonObject(m) || !Array.isArray(m.breadcrumb) || !isJsonObject(m.metadata)) continue;
        const meta = m.metadata;
        const [level, field] = m.breadcrumb;
        if (m.breadcrumb.length === 2 && level === 'properties' && typeof field === 'string' && meta.selected === false) deselected.add(field);
        if (m.breadcrumb.length !== 0) continue;
        if (Array.isArray(meta['table-key-properties'])) keys = meta['table-key-properties'].filter((k): k is string => typeof k === 'string');
        if (typeof meta['replication-key'] === 'string' && meta['replication-method'] !== 'FULL_TABLE') bookmark = [meta['replication-key']];
      }
    }
    return { schema: withoutFields(entry.schema ?? {}, deselected), keyProperties: keys, bookmarkProperties: bookmark, deselected };
  }
  return undefined;
}

/** The tap's SCHEMA message as the catalog narrows it: its deselected fields left out, its key and bookmark where it names them. */
function withCatalog(message: Extract<SingerMessage, { type: 'SCHEMA' }>, entry: CatalogEntry | undefined): Omit<Extract<SingerMessage, { type: 'SCHEMA' }>, 'type' | 'stream'> {
  if (entry === undefined) return message;
  return {
    schema: withoutFields(message.schema, entry.deselected),
    keyProperties: entry.keyProperties.length > 0 ? entry.keyProperties : message.keyProperties,
    bookmarkProperties: entry.bookmarkProperties.length > 0 ? entry.bookmarkProperties : message.bookmarkProperties,
  };
}

function withoutFields(schema: ExactJson, fields: ReadonlySet<string>): ExactJson {
  if (fields.size === 0 || !isJsonObject(schema) || !isJsonObject(schema.properties)) return schema;
  const properties = Object.fromEntries(Object.entries(schema.properties).filter(([name]) => !fields.has(name)));
  return { ...schema, properties } as ExactJson;
}

/** `schema` with the columns of `more` it lacks appended (a column a later SCHEMA leaves out stays, NULL from then on). */
function withColumnsOf(schema: StreamSchema, more: StreamSchema | undefined): StreamSchema {
  const have = new Set(schema.columns.map((c) => c.name));
  const added = (more?.columns ?? []).filter((c) => !have.has(c.name));
  return added.length === 0 ? schema : { ...schema, columns: [...schema.columns, ...added] };
}
