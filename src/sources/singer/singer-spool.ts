/**
 * Singer messages arriving on stdin (`tidemark target`), held per stream until a checkpoint (in spool files, so
 * memory stays bounded however long a tap goes between STATE messages). At a checkpoint the engine reads each
 * stream's spool through the Source interface; the last batch carries the tap's STATE.
 */
import type { JsonValue, OpenedRead, ReadRequest, Source, StreamSpec } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import type { StreamSchema } from '../../core/types.js';
import { parseExactJson, stringifyExactJson, type ExactJson } from '../../shared/exact-json.js';
import { SpoolFiles } from '../../shared/spool-files.js';
import { parseMessage, readLines, recordToRow, schemaFromSinger, singerBookmark, type SingerMessage } from './singer-messages.js';

export class SingerSpool implements Source {
  private readonly schemas = new Map<string, Extract<SingerMessage, { type: 'SCHEMA' }>>();
  private checkpoint: JsonValue | undefined;

  private constructor(private readonly files: SpoolFiles) {}

  static async create(): Promise<SingerSpool> {
    return new SingerSpool(await SpoolFiles.create('tidemark-target-'));
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
    return this.files.pending();
  }

  pendingRows(): number {
    return this.files.total();
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
    await this.files.append(message.stream, stringifyExactJson(message.record));
  }

  /** The tap STATE the next checkpoint commits with its records. */
  setCheckpoint(state: JsonValue | undefined): void {
    this.checkpoint = state;
  }

  /** Empties every spool once its records are committed. */
  async clear(): Promise<void> {
    await this.files.clear();
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    const tapStream = stream.singer?.tapStream ?? stream.name;
    return schemaFromSinger(stream.name, this.schemas.get(tapStream), stream.singer?.columns, stream.primaryKey, stream.cursor);
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const stream = request.stream;
    const schema = await this.discover(stream);
    const key = stream.singer?.tapStream ?? stream.name;
    const declared = stream.singer?.columns;
    const read = this.files.read(key, {
      schema,
      // Records stay in the tap's order, which for an incremental tap is usually the order of its replication key.
      ordered: schema.cursor !== undefined,
      batchRows: request.batchRows,
      toRow: (line) => recordToRow(parseExactJson(line) as ExactJson, schema, declared),
      ...(this.checkpoint !== undefined ? { resume: this.checkpoint } : {}),
    });
    // "Usually": the engine watches the order rather than failing a tap that does not sort (see singer-source.ts).
    return { ...read, claims: { bookmark: (token) => singerBookmark(token, key, schema.cursor) } };
  }

  async close(): Promise<void> {
    await this.files.close();
  }
}
