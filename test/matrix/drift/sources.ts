/**
 * The drift cells' sources: each writes rows of the drift model, changes its shape the way that source really does
 * (ALTER TABLE, a later file with other columns or types, a SCHEMA message), and says which changes it can make.
 */
import { appendFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DuckDBInstance } from '@duckdb/node-api';
import Database from 'better-sqlite3';
import { quoteIdent, quoteString } from '../../../src/shared/sql.js';
import { createMysqlDb } from '../../integration/mysql/mysql-db.js';
import { COPY_OPTIONS, type MonthFormat } from '../../e2e/schema/parquet-months.js';
import { STREAM } from '../fixture.js';
import { MATRIX_PG_URL, pgQuery } from '../pg.js';
import { streamYaml, yamlList } from '../sources/table-source.js';
import type { CellContext, Write } from '../types.js';
import { httpDrift } from './http-drift.js';
import { changeOf, KIND, rowOf, type Change, type DriftColumn, type DriftType } from './model.js';

/** `api`: an HTTP API whose columns tidemark infers from its records. */
export type SourceFamily = 'table' | 'files' | 'tap' | 'api';

export interface DriftSourceInstance {
  /** `source:` and `streams:` of the pipeline. */
  yaml(write: Write): string;
  /** Writes rows `from` ≤ i < `to` of the model with these columns (`change`: the values after it). */
  insert(columns: readonly DriftColumn[], change: Change | undefined, from: number, to: number): Promise<void>;
  /** Changes the source's shape from `before` to `after`. */
  alter(change: Change, before: readonly DriftColumn[], after: readonly DriftColumn[]): Promise<void>;
  cleanup(): Promise<void>;
}

export interface DriftSource {
  readonly name: string;
  readonly family: SourceFamily;
  readonly writes: readonly Write[];
  readonly changes: readonly Change[];
  setup(ctx: CellContext): Promise<DriftSourceInstance>;
}

const TABLE_CHANGES: readonly Change[] = ['new-column', 'dropped-column', 'widen-int', 'widen-int-double', 'widen-decimal', 'widen-float', 'widen-text', 'widen-ts', 'narrowing', 'case-rename'];

/** A database's names for the model's types. */
type TypeNames = Readonly<Record<DriftType, string>>;
const PG_TYPES: TypeNames = { int32: 'integer', int64: 'bigint', float32: 'real', float64: 'double precision', dec10_2: 'numeric(10,2)', dec14_4: 'numeric(14,4)', dec9_2: 'numeric(9,2)', vc10: 'varchar(10)', vc40: 'varchar(40)', ts3: 'timestamp(3)', ts6: 'timestamp(6)', text: 'text' };
const MY_TYPES: TypeNames = { int32: 'int', int64: 'bigint', float32: 'float', float64: 'double', dec10_2: 'decimal(10,2)', dec14_4: 'decimal(14,4)', dec9_2: 'decimal(9,2)', vc10: 'varchar(10)', vc40: 'varchar(40)', ts3: 'datetime(3)', ts6: 'datetime(6)', text: 'text' };
const SQLITE_TYPES: TypeNames = { int32: 'INTEGER', int64: 'INTEGER', float32: 'REAL', float64: 'REAL', dec10_2: 'DECIMAL(10,2)', dec14_4: 'DECIMAL(14,4)', dec9_2: 'DECIMAL(9,2)', vc10: 'VARCHAR(10)', vc40: 'VARCHAR(40)', ts3: 'TIMESTAMP', ts6: 'TIMESTAMP', text: 'TEXT' };

const ddl = (columns: readonly DriftColumn[], types: TypeNames, quote: (n: string) => string) =>
  columns.map((c) => `${quote(c.name)} ${types[c.type]}${c.name === 'id' ? ' PRIMARY KEY' : ''}`).join(', ');

function rows(columns: readonly DriftColumn[], change: Change | undefined, from: number, to: number) {
  return Array.from({ length: to - from }, (_, k) => rowOf(columns, change, from + k));
}

export const postgresDrift: DriftSource = {
  name: 'postgres',
  family: 'table',
  writes: ['append', 'merge', 'full'],
  changes: TABLE_CHANGES,
  async setup(ctx) {
    const schema = `mxd_${ctx.uid}`;
    const table = `${quoteIdent(schema)}.items`;
    await pgQuery(`CREATE SCHEMA ${quoteIdent(schema)}`);
    let created = false;
    return {
      yaml: (w) => `source:\n  type: postgres\n  url: ${JSON.stringify(MATRIX_PG_URL)}\nstreams:\n${streamYaml(`${schema}.items`, w)}`,
      async insert(columns, change, from, to) {
        if (!created) await pgQuery(`CREATE TABLE ${table} (${ddl(columns, PG_TYPES, quoteIdent)})`);
        created = true;
        const all = rows(columns, change, from, to);
        for (let i = 0; i < all.length; i += 500) {
          const part = all.slice(i, i + 500);
          const values = part.map((_, r) => `(${columns.map((_, c) => `$${r * columns.length + c + 1}`).join(', ')})`).join(', ');
          await pgQuery(`INSERT INTO ${table} (${columns.map((c) => quoteIdent(c.name)).join(', ')}) VALUES ${values}`, part.flatMap((row) => columns.map((c) => row[c.name] ?? null)));
        }
      },
      async alter(change) {
        const c = changeOf(change);
        if (c.add) await pgQuery(`ALTER TABLE ${table} ADD COLUMN ${quoteIdent(c.column)} ${PG_TYPES[c.add]}`);
        else if (c.drop) await pgQuery(`ALTER TABLE ${table} DROP COLUMN ${quoteIdent(c.column)}`);
        else if (c.rename) await pgQuery(`ALTER TABLE ${table} RENAME COLUMN ${quoteIdent(c.column)} TO ${quoteIdent(c.rename)}`);
        else await pgQuery(`ALTER TABLE ${table} ALTER COLUMN ${quoteIdent(c.column)} TYPE ${PG_TYPES[c.to!]}`);
      },
      cleanup: async () => void (await pgQuery(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`)),
    };
  },
};

const backtick = (n: string) => quoteIdent(n, 'backtick');

export const mariadbDrift: DriftSource = {
  name: 'mariadb',
  family: 'table',
  writes: ['append', 'merge', 'full'],
  changes: TABLE_CHANGES,
  async setup(ctx) {
    const db = await createMysqlDb(`mxd_${ctx.uid}`.slice(0, 30));
    const conn = await db.connect();
    await conn.query(`SET time_zone = '+00:00'`);
    let created = false;
    return {
      yaml: (w) => `source:\n  type: mariadb\n  url: ${JSON.stringify(db.url)}\nstreams:\n${streamYaml('items', w)}`,
      async insert(columns, change, from, to) {
        if (!created) await conn.query(`CREATE TABLE items (${ddl(columns, MY_TYPES, backtick)}) CHARACTER SET utf8mb4`);
        created = true;
        const all = rows(columns, change, from, to);
        for (let i = 0; i < all.length; i += 500) {
          const part = all.slice(i, i + 500);
          const values = part.map(() => `(${columns.map(() => '?').join(', ')})`).join(', ');
          await conn.query(`INSERT INTO items (${columns.map((c) => backtick(c.name)).join(', ')}) VALUES ${values}`, part.flatMap((row) => columns.map((c) => row[c.name] ?? null)));
        }
      },
      async alter(change, _before, after) {
        const c = changeOf(change);
        if (c.add) await conn.query(`ALTER TABLE items ADD COLUMN ${backtick(c.column)} ${MY_TYPES[c.add]}`);
        else if (c.drop) await conn.query(`ALTER TABLE items DROP COLUMN ${backtick(c.column)}`);
        else if (c.rename) await conn.query(`ALTER TABLE items RENAME COLUMN ${backtick(c.column)} TO ${backtick(c.rename)}`);
        else await conn.query(`ALTER TABLE items MODIFY ${backtick(c.column)} ${MY_TYPES[after.find((x) => x.name === c.column)!.type]}`);
      },
      cleanup: () => db.drop(),
    };
  },
};

export const sqliteDrift: DriftSource = {
  name: 'sqlite',
  family: 'table',
  writes: ['append', 'merge', 'full'],
  // SQLite's declared types name no integer width, float width or timestamp precision.
  changes: ['new-column', 'dropped-column', 'widen-int-double', 'widen-decimal', 'widen-text', 'narrowing', 'case-rename'],
  async setup(ctx) {
    const path = join(ctx.dir, 'source.sqlite');
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    const create = (table: string, columns: readonly DriftColumn[]) => db.exec(`CREATE TABLE ${quoteIdent(table)} (${ddl(columns, SQLITE_TYPES, quoteIdent)})`);
    let created = false;
    return {
      yaml: (w) => `source:\n  type: sqlite\n  path: ${JSON.stringify(path)}\nstreams:\n${streamYaml('items', w)}`,
      async insert(columns, change, from, to) {
        if (!created) create('items', columns);
        created = true;
        // Typed as the model's kinds: numbers as numbers where SQLite would store them so, decimals as their text.
        const insert = db.prepare(`INSERT INTO items (${columns.map((c) => quoteIdent(c.name)).join(', ')}) VALUES (${columns.map(() => '?').join(', ')})`);
        const bind = (c: DriftColumn, v: string | null) => (v === null ? null : KIND[c.type] === 'int' ? BigInt(v) : KIND[c.type] === 'float' ? Number(v) : v);
        db.transaction(() => {
          for (const row of rows(columns, change, from, to)) insert.run(...columns.map((c) => bind(c, row[c.name] ?? null)));
        })();
      },
      async alter(change, _before, after) {
        const c = changeOf(change);
        if (c.add) db.exec(`ALTER TABLE items ADD COLUMN ${quoteIdent(c.column)} ${SQLITE_TYPES[c.add]}`);
        else if (c.drop) db.exec(`ALTER TABLE items DROP COLUMN ${quoteIdent(c.column)}`);
        else if (c.rename) db.exec(`ALTER TABLE items RENAME COLUMN ${quoteIdent(c.column)} TO ${quoteIdent(c.rename)}`);
        else {
          // SQLite changes a declared type only by rebuilding the table.
          db.transaction(() => {
            create('items_new', after);
            const names = after.map((x) => quoteIdent(x.name)).join(', ');
            db.exec(`INSERT INTO items_new (${names}) SELECT ${names} FROM items; DROP TABLE items; ALTER TABLE items_new RENAME TO items`);
          })();
        }
      },
      cleanup: async () => void db.close(),
    };
  },
};

/** DuckDB's names for the model's types, for writing Parquet (CSV and JSONL carry no types). */
const PARQUET_TYPES: TypeNames = { int32: 'INTEGER', int64: 'BIGINT', float32: 'FLOAT', float64: 'DOUBLE', dec10_2: 'DECIMAL(10,2)', dec14_4: 'DECIMAL(14,4)', dec9_2: 'DECIMAL(9,2)', vc10: 'VARCHAR', vc40: 'VARCHAR', ts3: 'TIMESTAMP_MS', ts6: 'TIMESTAMP', text: 'VARCHAR' };

/** CSV and JSONL: numbers as numbers, instants as their six-digit text (what a writer of such files would give). */
const TEXT_FILE_TYPES: TypeNames = { ...PARQUET_TYPES, float32: 'DOUBLE', dec10_2: 'DOUBLE', dec14_4: 'DOUBLE', dec9_2: 'DOUBLE', ts3: 'VARCHAR', ts6: 'VARCHAR' };

/** A files stream: every `insert` is a new partition (month) file with the columns as they are then. */
function filesDrift(format: MonthFormat): DriftSource {
  return {
    name: `files-${format}`,
    family: 'files',
    writes: ['append'],
    changes: ['new-column', 'dropped-column', 'widen-int', 'widen-int-double', 'widen-decimal', 'widen-float', 'widen-ts', 'narrowing', 'case-rename'],
    async setup(ctx) {
      const data = join(ctx.dir, 'files');
      const staged = join(ctx.dir, 'month-values.jsonl');
      let month = 0;
      return {
        yaml: () =>
          `source:\n  type: files\n  location: ${JSON.stringify(data)}\nstreams:\n${yamlList({ name: STREAM, pattern: `m-{month}.${format}`, partition_column: 'month', batch_rows: 700 })}`,
        async insert(columns, change, from, to) {
          month += 1;
          await writeFile(staged, rows(columns, change, from, to).map((row) => JSON.stringify(row)).join('\n') + '\n');
          const types = format === 'parquet' ? PARQUET_TYPES : TEXT_FILE_TYPES;
          const typed = columns.map((c) => `CAST(${quoteIdent(c.name)} AS ${types[c.type]}) AS ${quoteIdent(c.name)}`).join(', ');
          const text = columns.map((c) => `${quoteString(c.name)}: 'VARCHAR'`).join(', ');
          const target = join(data, `m-2024-${String(month).padStart(2, '0')}.${format}`);
          const instance = await DuckDBInstance.create(':memory:');
          const connection = await instance.connect();
          try {
            await mkdir(data, { recursive: true });
            await connection.run(`COPY (SELECT ${typed} FROM read_json(${quoteString(staged)}, format = 'newline_delimited', columns = {${text}})) TO ${quoteString(target)} (${COPY_OPTIONS[format]})`);
          } finally {
            connection.closeSync();
            instance.closeSync();
          }
        },
        async alter() {
          // A files source changes shape with the next file: nothing to do until then.
        },
        cleanup: async () => undefined,
      };
    },
  };
}

export const filesDrifts: readonly DriftSource[] = (['parquet', 'csv', 'jsonl'] as const).map(filesDrift);

const TAP = fileURLToPath(new URL('./tap-drift.mjs', import.meta.url));
const CONNECTOR = fileURLToPath(new URL('./airbyte-drift.mjs', import.meta.url));
const JSON_TYPES: Readonly<Record<string, unknown>> = {
  int: { type: ['null', 'integer'] },
  float: { type: ['null', 'number'] },
  decimal: { type: ['null', 'string'] },
  text: { type: ['null', 'string'] },
  ts: { type: ['null', 'string'], format: 'date-time', airbyte_type: 'timestamp_with_timezone' },
};

/**
 * The data file of a tap or connector: SCHEMA lines and records in order. A tap sends a SCHEMA line where it comes
 * (between records: mid-stream); a connector's catalog is the last one.
 */
function messageFile(ctx: CellContext) {
  const data = join(ctx.dir, 'messages.jsonl');
  let schemaOf = '';
  const schemaLine = (columns: readonly DriftColumn[]) =>
    JSON.stringify({ type: 'SCHEMA', stream: STREAM, key_properties: ['id'], bookmark_properties: ['updated_at'], schema: { type: 'object', properties: Object.fromEntries(columns.map((c) => [c.name, c.name === 'id' ? { type: 'integer' } : JSON_TYPES[KIND[c.type]]])) } });
  const json = (c: DriftColumn, v: string | null) => (v === null ? 'null' : KIND[c.type] === 'int' || KIND[c.type] === 'float' ? v : KIND[c.type] === 'ts' ? JSON.stringify(`${v.replace(' ', 'T')}Z`) : JSON.stringify(v));
  return {
    data,
    async insert(columns: readonly DriftColumn[], change: Change | undefined, from: number, to: number) {
      const schema = schemaLine(columns);
      const lines = schema === schemaOf ? [] : [schema];
      schemaOf = schema;
      for (const row of rows(columns, change, from, to)) lines.push(`{${columns.map((c) => `${JSON.stringify(c.name)}:${json(c, row[c.name] ?? null)}`).join(',')}}`);
      await appendFile(data, lines.join('\n') + '\n');
    },
  };
}

export const singerDrift: DriftSource = {
  name: 'singer',
  family: 'tap',
  writes: ['append', 'merge'],
  changes: ['new-column', 'dropped-column', 'schema-message'],
  async setup(ctx) {
    const file = messageFile(ctx);
    return {
      yaml: (w) =>
        [
          'source:',
          '  type: singer',
          `  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}]`,
          `  config: {data: ${JSON.stringify(file.data)}, state_every: 500}`,
          'streams:',
          yamlList({ name: STREAM, primary_key: 'id', write: w, checkpoint_rows: 500 }),
        ].join('\n'),
      insert: file.insert,
      async alter() {
        // The next insert starts with the new SCHEMA message.
      },
      cleanup: async () => undefined,
    };
  },
};

/** An Airbyte connector's shape changes only with its catalog, between runs: Airbyte's read sends no schema. */
export const airbyteDrift: DriftSource = {
  name: 'airbyte',
  family: 'tap',
  writes: ['append', 'merge'],
  changes: ['new-column', 'dropped-column'],
  async setup(ctx) {
    const file = messageFile(ctx);
    return {
      yaml: (w) =>
        [
          'source:',
          '  type: airbyte',
          `  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(CONNECTOR)}]`,
          `  config: {data: ${JSON.stringify(file.data)}, state_every: 500}`,
          'streams:',
          yamlList({ name: STREAM, primary_key: 'id', write: w, checkpoint_rows: 500 }),
        ].join('\n'),
      insert: file.insert,
      async alter() {
        // The next insert writes the new schema, which the next discover returns.
      },
      cleanup: async () => undefined,
    };
  },
};

export const DRIFT_SOURCES: readonly DriftSource[] = [postgresDrift, mariadbDrift, sqliteDrift, ...filesDrifts, singerDrift, airbyteDrift, httpDrift];
