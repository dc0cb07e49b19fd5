/**
 * State in Postgres (`state: {type: postgres, url, schema}`): current state and history tables in `schema`
 * (created when missing), compare-and-set under a per-pipeline transaction lock, and an advisory-lock lease.
 */
import type pg from 'pg';
import type { Lease, SaveMeta, LeaseOptions, LeaseHolder } from '../../core/connector.js';
import { StateError } from '../../core/errors.js';
import { redact } from '../../core/logger.js';
import type { PipelineState, PipelineStateVersion } from '../../core/types.js';
import { connectPostgres, describeUrl, ensureSchema, pgParams, toDollarPlaceholders } from '../../shared/postgres-client.js';
import { quoteIdent } from '../../shared/sql.js';
import { SqlStateTables, type StoreExecutor, type StoreParam, type StoreRow } from '../sql/sql-state-tables.js';
import { StateOnlyStore, type ExternalStateStore } from '../state-store.js';
import { PostgresLeaseProvider } from './postgres-lease.js';

export interface PostgresStateStoreOptions {
  readonly url: string;
  readonly schema?: string;
}

class PostgresStoreExecutor implements StoreExecutor {
  constructor(
    private readonly client: pg.Client,
    private readonly schema: string,
  ) {}

  async query(sql: string, params: readonly StoreParam[] = []): Promise<StoreRow[]> {
    try {
      return (await this.client.query(toDollarPlaceholders(sql), pgParams(params))).rows as StoreRow[];
    } catch (error) {
      const code = (error as { code?: string }).code;
      // Two first saves may race to create the tables; the loser's "already exists" is success.
      if (/^\s*CREATE TABLE IF NOT EXISTS/i.test(sql) && (code === '42P07' || code === '42710' || code === '23505')) return [];
      throw new StateError(`Postgres state store: ${redact((error as Error).message)}`, { cause: error });
    }
  }

  async transaction<T>(pipeline: string, fn: () => Promise<T>): Promise<T> {
    await this.client.query('BEGIN');
    try {
      await this.client.query(`SELECT pg_advisory_xact_lock(hashtext('tidemark.store'), hashtext($1))`, [`${this.schema}.${pipeline}`]);
      const out = await fn();
      await this.client.query('COMMIT');
      return out;
    } catch (error) {
      await this.client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
  }
}

export class PostgresStateStore extends StateOnlyStore implements ExternalStateStore {
  readonly description: string;
  private readonly tables: SqlStateTables;
  private readonly leases: PostgresLeaseProvider;

  private constructor(
    private readonly client: pg.Client,
    url: string,
    schema: string,
  ) {
    super();
    this.description = `Postgres state store ${describeUrl(url)} schema ${schema}`;
    this.tables = new SqlStateTables(new PostgresStoreExecutor(client, schema), (name) => `${quoteIdent(schema)}.${quoteIdent(name)}`, this.description);
    this.leases = new PostgresLeaseProvider(url, schema);
  }

  static async open(options: PostgresStateStoreOptions): Promise<PostgresStateStore> {
    const schema = options.schema ?? 'tidemark';
    let client: pg.Client;
    try {
      client = await connectPostgres(options.url, 'tidemark-state');
    } catch (error) {
      throw new StateError((error as Error).message, { context: { phase: 'state' }, cause: error });
    }
    try {
      await ensureSchema(client, schema, quoteIdent(schema));
    } catch (error) {
      await client.end().catch(() => undefined);
      throw new StateError(`cannot prepare schema ${schema} in ${describeUrl(options.url)}: ${redact((error as Error).message)}`, { cause: error });
    }
    return new PostgresStateStore(client, options.url, schema);
  }

  load(pipeline: string): Promise<PipelineState | undefined> {
    return this.tables.load(pipeline);
  }

  save(next: PipelineState, expectedVersion: number | undefined, meta: SaveMeta): Promise<void> {
    return this.tables.save(next, expectedVersion, meta, false);
  }

  repair(next: PipelineState, meta: SaveMeta): Promise<void> {
    return this.tables.save(next, undefined, meta, true);
  }

  history(pipeline: string): Promise<readonly PipelineStateVersion[]> {
    return this.tables.history(pipeline);
  }

  pipelines(): Promise<readonly PipelineState[]> {
    return this.tables.pipelines();
  }

  remove(pipeline: string): Promise<number> {
    return this.tables.remove(pipeline);
  }

  acquire(pipeline: string, options: LeaseOptions): Promise<Lease> {
    return this.leases.acquire(pipeline, options);
  }

  holder(pipeline: string): Promise<LeaseHolder | undefined> {
    return this.leases.holder(pipeline);
  }

  async close(): Promise<void> {
    await this.client.end().catch(() => undefined);
  }
}
