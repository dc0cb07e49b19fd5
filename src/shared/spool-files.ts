/**
 * Records held per stream until a checkpoint commits them: one temp file per stream, written in chunks, so memory
 * stays bounded however long a producer goes between checkpoints. Used by `tidemark target` (Singer) and
 * `tidemark airbyte-destination` (Airbyte), which read each stream's lines back through the Source interface.
 */
import { createReadStream } from 'node:fs';
import { open, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Batch, JsonValue, OpenedRead } from '../core/connector.js';
import type { Row, StreamSchema } from '../core/types.js';
import { readLines } from './lines.js';
import { ownedTempDir, removeOrphanTempDirs } from './process.js';

/** Lines are written to the files in chunks of about this size. */
const WRITE_CHUNK = 256 * 1024;

interface Spool {
  readonly file: string;
  handle: FileHandle | undefined;
  buffered: string[];
  bufferedBytes: number;
  rows: number;
}

export class SpoolFiles {
  private readonly spools = new Map<string, Spool>();

  private constructor(private readonly dir: string) {}

  /** A new spool directory; those of killed processes (same prefix) are removed first. */
  static async create(prefix: string): Promise<SpoolFiles> {
    await removeOrphanTempDirs(prefix);
    return new SpoolFiles(await ownedTempDir(prefix));
  }

  /** Appends one line (without its newline) to a stream's file. */
  async append(key: string, line: string): Promise<void> {
    let spool = this.spools.get(key);
    if (!spool) {
      spool = { file: join(this.dir, `${this.spools.size}.jsonl`), handle: undefined, buffered: [], bufferedBytes: 0, rows: 0 };
      this.spools.set(key, spool);
    }
    const text = `${line}\n`;
    spool.buffered.push(text);
    spool.bufferedBytes += text.length;
    spool.rows += 1;
    if (spool.bufferedBytes >= WRITE_CHUNK) await this.drain(spool);
  }

  rows(key: string): number {
    return this.spools.get(key)?.rows ?? 0;
  }

  /** Streams with lines waiting, in order of their first line. */
  pending(): string[] {
    return [...this.spools.entries()].filter(([, s]) => s.rows > 0).map(([key]) => key);
  }

  total(): number {
    let n = 0;
    for (const s of this.spools.values()) n += s.rows;
    return n;
  }

  /**
   * One stream's spooled lines as a source read: the first `limit` lines (every line by default) as rows, in batches
   * of `batchRows`; the last batch carries `resume`, the position those lines lead to.
   */
  read(
    key: string,
    options: { readonly schema: StreamSchema; readonly ordered: boolean; readonly batchRows: number; readonly toRow: (line: string) => Row; readonly limit?: number; readonly resume?: JsonValue },
  ): OpenedRead {
    const { schema, ordered, batchRows, toRow, limit = Number.POSITIVE_INFINITY, resume } = options;
    const lines = () => this.lines(key);
    return {
      schema,
      until: null,
      nullCursorRows: 0,
      predicate: 'records from stdin',
      bindings: [],
      ordered,
      resumable: true,
      close: async () => undefined,
      async *batches(): AsyncIterable<Batch> {
        let rows: Row[] = [];
        let read = 0;
        if (limit > 0) {
          for await (const line of lines()) {
            rows.push(toRow(line));
            read += 1;
            if (read >= limit) break;
            if (rows.length >= batchRows) {
              yield { rows };
              rows = [];
            }
          }
        }
        yield resume !== undefined ? { rows, resume } : { rows };
      },
    };
  }

  /** A stream's lines in the order they were appended. */
  async *lines(key: string): AsyncGenerator<string> {
    const spool = this.spools.get(key);
    if (!spool || spool.rows === 0) return;
    await this.drain(spool);
    for await (const line of readLines(createReadStream(spool.file), 'the spool')) {
      if (line !== '') yield line;
    }
  }

  /** Empties one stream's file, or every file. */
  async clear(key?: string): Promise<void> {
    for (const [name, spool] of this.spools) {
      if (key !== undefined && name !== key) continue;
      await spool.handle?.truncate(0);
      spool.buffered = [];
      spool.bufferedBytes = 0;
      spool.rows = 0;
    }
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
