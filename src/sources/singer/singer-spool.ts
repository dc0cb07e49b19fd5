/**
 * Singer messages arriving on stdin (`tidemark target`), held per stream until a checkpoint: records go to one
 * temp file per stream, so memory stays bounded however long a tap goes between STATE messages. At a checkpoint
 * the engine reads each stream's spool through the Source interface; the last batch carries the tap's STATE.
 */
import { createReadStream } from 'node:fs';
import { mkdtemp, open, rm, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Batch, JsonValue, OpenedRead, ReadRequest, Source, StreamSpec } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import type { Row, StreamSchema } from '../../core/types.js';
import { parseExactJson, stringifyExactJson, type ExactJson } from '../../shared/exact-json.js';
import { parseMessage, readLines, recordToRow, schemaFromSinger, type SingerMessage } from './singer-messages.js';

/** Records are written to the spool files in chunks of about this size. */
const WRITE_CHUNK = 256 * 1024;

interface Spool {
  readonly file: string;
  handle: FileHandle | undefined;
  buffered: string[];
  bufferedBytes: number;
  rows: number;
}

export class SingerSpool implements Source {
  private readonly schemas = new Map<string, Extract<SingerMessage, { type: 'SCHEMA' }>>();
  private readonly spools = new Map<string, Spool>();
  private checkpoint: JsonValue | undefined;

  private constructor(private readonly dir: string) {}

  static async create(): Promise<SingerSpool> {
    return new SingerSpool(await mkdtemp(join(tmpdir(), 'tidemark-target-')));
  }

  /** The messages of a Singer stream (stdin), parsed line by line, with their line numbers. */
  async *messages(input: AsyncIterable<Buffer | string>): AsyncGenerator<{ readonly message: SingerMessage; readonly line: number }> {
    let line = 0;
    for await (const text of readLines(input, 'stdin')) {
      line += 1;
      const message = parseMessage(text, 'stdin', line);
      if (message) yield { message, line };
    }
  }

  /** Tap streams that have a SCHEMA, in order of arrival. */
  streams(): string[] {
    return [...this.schemas.keys()];
  }

  schemaMessage(tapStream: string): Extract<SingerMessage, { type: 'SCHEMA' }> | undefined {
    return this.schemas.get(tapStream);
  }

  /** Tap streams with records waiting for the next checkpoint. */
  pendingStreams(): string[] {
    return [...this.spools.entries()].filter(([, s]) => s.rows > 0).map(([name]) => name);
  }

  pendingRows(): number {
    let n = 0;
    for (const s of this.spools.values()) n += s.rows;
    return n;
  }

  async add(message: SingerMessage, lineNumber: number): Promise<void> {
    if (message.type === 'SCHEMA') {
      this.schemas.set(message.stream, message);
      return;
    }
    if (message.type !== 'RECORD') return;
    if (!this.schemas.has(message.stream)) {
      throw new SourceError(`stdin line ${lineNumber}: RECORD of stream ${message.stream} before its SCHEMA`, { context: { phase: 'extract', at: `line ${lineNumber}` } });
    }
    let spool = this.spools.get(message.stream);
    if (!spool) {
      spool = { file: join(this.dir, `${this.spools.size}.jsonl`), handle: undefined, buffered: [], bufferedBytes: 0, rows: 0 };
      this.spools.set(message.stream, spool);
    }
    const line = `${stringifyExactJson(message.record)}\n`;
    spool.buffered.push(line);
    spool.bufferedBytes += line.length;
    spool.rows += 1;
    if (spool.bufferedBytes >= WRITE_CHUNK) await this.drain(spool);
  }

  /** The tap STATE the next checkpoint commits with its records. */
  setCheckpoint(state: JsonValue | undefined): void {
    this.checkpoint = state;
  }

  /** Empties every spool once its records are committed. */
  async clear(): Promise<void> {
    for (const spool of this.spools.values()) {
      await spool.handle?.truncate(0);
      spool.buffered = [];
      spool.bufferedBytes = 0;
      spool.rows = 0;
    }
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    const tapStream = stream.singer?.tapStream ?? stream.name;
    return schemaFromSinger(stream.name, this.schemas.get(tapStream), stream.singer?.columns, stream.primaryKey, stream.cursor);
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const stream = request.stream;
    const schema = await this.discover(stream);
    const spool = this.spools.get(stream.singer?.tapStream ?? stream.name);
    if (spool) await this.drain(spool);
    const checkpoint = this.checkpoint;
    const declared = stream.singer?.columns;
    const count = spool?.rows ?? 0;
    return {
      schema,
      until: null,
      nullCursorRows: 0,
      predicate: `records from stdin`,
      bindings: [],
      // Records stay in the tap's order, which for an incremental tap is the order of its replication key.
      ordered: schema.cursor !== undefined,
      resumable: true,
      close: async () => undefined,
      async *batches(): AsyncIterable<Batch> {
        let rows: Row[] = [];
        if (spool && count > 0) {
          for await (const line of readLines(createReadStream(spool.file), 'the spool')) {
            if (line === '') continue;
            rows.push(recordToRow(parseExactJson(line) as ExactJson, schema, declared));
            if (rows.length >= request.batchRows) {
              yield { rows };
              rows = [];
            }
          }
        }
        yield checkpoint !== undefined ? { rows, resume: checkpoint } : { rows };
      },
    };
  }

  async close(): Promise<void> {
    for (const spool of this.spools.values()) await spool.handle?.close().catch(() => undefined);
    await rm(this.dir, { recursive: true, force: true });
  }

  private async drain(spool: Spool): Promise<void> {
    if (spool.buffered.length === 0) return;
    spool.handle ??= await open(spool.file, 'a+', 0o600);
    await spool.handle.appendFile(spool.buffered.join(''));
    spool.buffered = [];
    spool.bufferedBytes = 0;
  }
}
