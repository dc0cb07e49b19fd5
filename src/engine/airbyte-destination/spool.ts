/**
 * The records of an Airbyte `write`, held per stream until a checkpoint commits them (spool files, bounded memory),
 * and read back by the engine through the Source interface: one read per stream and checkpoint, whose last batch
 * carries the checkpoint's position. Only records that arrived before the latest STATE are ever read back.
 */
import type { JsonValue, OpenedRead, ReadRequest, Source, StreamSpec } from '../../core/connector.js';
import { SourceError } from '../../core/errors.js';
import type { StreamSchema } from '../../core/types.js';
import { parseExactJson, stringifyExactJson, type ExactJson } from '../../shared/exact-json.js';
import { SpoolFiles } from '../../shared/spool-files.js';
import { recordToRow } from '../../sources/singer/singer-messages.js';
import { DATA_COLUMN, type CatalogStream } from './protocol.js';

export class AirbyteSpool implements Source {
  private checkpoint: (table: string) => JsonValue | undefined = () => undefined;
  /** Records of each stream that arrived before the latest STATE: a checkpoint reads no further. */
  private readonly beforeState = new Map<string, number>();

  private constructor(
    private readonly files: SpoolFiles,
    private readonly byTable: ReadonlyMap<string, CatalogStream>,
  ) {}

  static async create(streams: readonly CatalogStream[]): Promise<AirbyteSpool> {
    return new AirbyteSpool(await SpoolFiles.create('tidemark-airbyte-destination-'), new Map(streams.map((s) => [s.table, s])));
  }

  async add(table: string, data: ExactJson): Promise<void> {
    await this.files.append(table, stringifyExactJson(data));
  }

  /** A STATE arrived: everything spooled so far (of one stream, or of all) may commit with it. */
  markState(table?: string): void {
    for (const t of table !== undefined ? [table] : this.files.pending()) this.beforeState.set(t, this.files.rows(t));
  }

  /** Records a checkpoint would commit now (those before the latest STATE). */
  committableRows(): number {
    let n = 0;
    for (const table of this.files.pending()) n += this.committable(table);
    return n;
  }

  committableStreams(): string[] {
    return this.files.pending().filter((t) => this.committable(t) > 0);
  }

  /** Records that arrived after the latest STATE (of one stream, or of all). */
  trailingRows(table?: string): number {
    return table !== undefined ? this.files.rows(table) - this.committable(table) : this.files.total() - this.committableRows();
  }

  /** Each stream's position the next checkpoint commits with its records (undefined: the stored one stays). */
  setCheckpoint(position: (table: string) => JsonValue | undefined): void {
    this.checkpoint = position;
  }

  /** Drops one stream's spooled records (a restarted write was sent them again, and they are committed). */
  async discard(table: string): Promise<number> {
    const n = this.files.rows(table);
    await this.files.clear(table);
    this.beforeState.delete(table);
    return n;
  }

  async clear(): Promise<void> {
    await this.files.clear();
    this.beforeState.clear();
  }

  async discover(stream: StreamSpec): Promise<StreamSchema> {
    const known = this.byTable.get(stream.name);
    if (known === undefined) throw new SourceError(`stream ${stream.name} is not in the configured catalog`);
    return known.schema;
  }

  async open(request: ReadRequest): Promise<OpenedRead> {
    const schema = await this.discover(request.stream);
    const table = request.stream.name;
    const checkpoint = this.checkpoint(table);
    const whole = schema.columns.length === 1 && schema.columns[0]!.name === DATA_COLUMN;
    return this.files.read(table, {
      schema,
      ordered: true,
      batchRows: request.batchRows,
      toRow: (line) => (whole ? [line] : recordToRow(parseExactJson(line), schema, undefined)),
      limit: this.committable(table),
      ...(checkpoint !== undefined ? { resume: checkpoint } : {}),
    });
  }

  async close(): Promise<void> {
    await this.files.close();
  }

  private committable(table: string): number {
    return Math.min(this.beforeState.get(table) ?? 0, this.files.rows(table));
  }
}
