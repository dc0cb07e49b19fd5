/**
 * Turning staged rows into Parquet, JSONL or CSV files through an in-memory DuckDB. Rows arrive lossless (bigint,
 * canonical decimal and timestamp strings); they are appended as wide stage types and cast to the exact column type
 * in the COPY, so DuckDB — not JS — decides every value's binary form.
 */
import { rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import type { FileFormat } from '../../core/connector.js';
import type { Column, Row } from '../../core/types.js';
import { ownedTempDir, removeOrphanTempDirs } from '../../shared/process.js';
import { Turns } from '../../shared/turns.js';
import { quoteIdent, quoteString } from '../../shared/sql.js';
import { appendRowsWithSeq, duckdbColumnType, duckdbStageType as stageType } from '../duckdb/duckdb-types.js';
import type { LakeCompression } from './lake-layout.js';

const TEMP_PREFIX = 'tidemark-lake-';

/** The type a column is written as; wider-than-DuckDB decimals and intervals stay exact as text. */
export const lakeColumnType = duckdbColumnType;

export interface WrittenFile {
  readonly file: string;
  readonly rows: number;
  readonly bytes: number;
  /** The value of the `partitionBy` column shared by every row of the file (as text; null for NULL). */
  readonly hiveValue?: string | null;
}

export interface WriteOptions {
  readonly format: FileFormat;
  readonly compression: LakeCompression;
  readonly partitionBy?: string;
}

function copyOptions(format: FileFormat, compression: LakeCompression): string {
  if (format === 'parquet') return `FORMAT parquet, COMPRESSION ${compression === 'none' ? 'uncompressed' : compression}`;
  const codec = compression === 'none' || compression === 'snappy' ? 'none' : compression;
  return format === 'csv' ? `FORMAT csv, HEADER true, COMPRESSION ${codec}` : `FORMAT json, COMPRESSION ${codec}`;
}

/** One in-memory DuckDB per destination: staging tables, and the COPY that writes files from them. */
export class LakeWriter {
  private stages = 0;
  private readonly tempDirs = new Set<string>();
  /**
   * Parallel range writers share this connection, and a DuckDB connection runs one statement at a time: one started
   * while another's result is still pending fails it ("unsuccessful or closed pending query result").
   */
  private readonly turns = new Turns();

  private constructor(
    private readonly instance: DuckDBInstance,
    readonly connection: DuckDBConnection,
  ) {}

  static async create(): Promise<LakeWriter> {
    const instance = await DuckDBInstance.create(':memory:');
    const connection = await instance.connect();
    await connection.run(`SET TimeZone = 'UTC'`);
    return new LakeWriter(instance, connection);
  }

  /** A directory for files on their way to the lake; those of killed runs are removed first. */
  async tempDir(): Promise<string> {
    await removeOrphanTempDirs(TEMP_PREFIX);
    const dir = await ownedTempDir(TEMP_PREFIX);
    this.tempDirs.add(dir);
    return dir;
  }

  async removeTempDir(dir: string): Promise<void> {
    this.tempDirs.delete(dir);
    await rm(dir, { recursive: true, force: true });
  }

  async createStage(columns: readonly Column[]): Promise<string> {
    this.stages += 1;
    const name = `_stage_${this.stages}`;
    const ddl = [...columns.map((c) => `${quoteIdent(c.name)} ${stageType(c.type)}`), '_tidemark_seq BIGINT'].join(', ');
    await this.turns.run(() => this.connection.run(`CREATE TABLE ${quoteIdent(name)} (${ddl})`));
    return name;
  }

  async append(stage: string, columns: readonly Column[], rows: readonly Row[], firstSeq: number): Promise<void> {
    await this.turns.run(async () => appendRowsWithSeq(await this.connection.createAppender(stage), columns, rows, firstSeq));
  }

  async clearStage(stage: string): Promise<void> {
    await this.turns.run(() => this.connection.run(`DELETE FROM ${quoteIdent(stage)}`));
  }

  async dropStage(stage: string): Promise<void> {
    await this.turns.run(() => this.connection.run(`DROP TABLE IF EXISTS ${quoteIdent(stage)}`));
  }

  /**
   * Writes the staged rows, in staging order, to files in `dir` named by `name(n)`: one file, or one per distinct
   * value of `partitionBy`.
   */
  async writeFiles(stage: string, columns: readonly Column[], dir: string, name: (n: number) => string, options: WriteOptions): Promise<WrittenFile[]> {
    const select = columns.map((c) => `CAST(${quoteIdent(c.name)} AS ${lakeColumnType(c.type)}) AS ${quoteIdent(c.name)}`).join(', ');
    const out: WrittenFile[] = [];
    const write = async (where: string, hiveValue?: string | null): Promise<void> => {
      const file = join(dir, name(out.length));
      const result = await this.turns.run(() =>
        this.connection.run(`COPY (SELECT ${select} FROM ${quoteIdent(stage)}${where} ORDER BY _tidemark_seq) TO ${quoteString(file)} (${copyOptions(options.format, options.compression)})`),
      );
      const rows = Number(result.rowsChanged);
      out.push({ file, rows, bytes: (await stat(file)).size, ...(hiveValue !== undefined ? { hiveValue } : {}) });
    };
    if (options.partitionBy === undefined) {
      await write('');
      return out;
    }
    const column = quoteIdent(options.partitionBy);
    const values = await this.turns.run(() => this.connection.runAndReadAll(`SELECT DISTINCT CAST(${column} AS VARCHAR) AS v FROM ${quoteIdent(stage)} ORDER BY v NULLS LAST`));
    for (const [v] of values.getRowsJS() as [string | null][]) {
      await write(v === null ? ` WHERE ${column} IS NULL` : ` WHERE CAST(${column} AS VARCHAR) = ${quoteString(v)}`, v);
    }
    return out;
  }

  /** A read-only query's rows, each value as text or null (`?` bound as text). */
  async rows(sql: string, params: readonly string[]): Promise<(string | null)[][]> {
    const result = await this.turns.run(() => this.connection.runAndReadAll(sql, [...params]));
    return result.getRowsJS().map((row) => row.map((v) => (v === null || v === undefined ? null : String(v))));
  }

  /** Writes the rows of a query, in its order, to `file`. */
  async copyQuery(sql: string, file: string, options: Omit<WriteOptions, 'partitionBy'>): Promise<{ rows: number; bytes: number }> {
    const result = await this.turns.run(() => this.connection.run(`COPY (${sql}) TO ${quoteString(file)} (${copyOptions(options.format, options.compression)})`));
    return { rows: Number(result.rowsChanged), bytes: (await stat(file)).size };
  }

  async close(): Promise<void> {
    for (const dir of this.tempDirs) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    this.connection.closeSync();
    this.instance.closeSync();
  }
}
