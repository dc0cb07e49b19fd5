/**
 * A lease held as a Postgres session-level advisory lock on a dedicated connection, with a fencing token that
 * grows in `<schema>._tidemark_leases` each time the lock is taken. The lock lives exactly as long as the session:
 * a killed run frees it at once; a frozen or cut-off one loses it after `ttl` (`idle_session_timeout`), and its
 * later commit is refused by the token check.
 */
import { hostname } from 'node:os';
import type pg from 'pg';
import type { Lease, LeaseHolder, LeaseProvider, LeaseOptions } from '../../core/connector.js';
import { ConflictError, LeaseLostError, StateError } from '../../core/errors.js';
import { redact } from '../../core/logger.js';
import { connectPostgres, describeUrl, ensureSchema } from '../../shared/postgres-client.js';
import { quoteIdent } from '../../shared/sql.js';

const TABLE = '_tidemark_leases';

/** Sessions holding a lease's advisory lock in this mode (`ExclusiveLock`: a run; `ShareLock`: partition jobs). */
async function advisoryHolders(client: pg.Client, key: string, mode: 'ExclusiveLock' | 'ShareLock'): Promise<number> {
  const rows = await client.query(
    `SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND mode = $2 AND granted AND objsubid = 2
     AND classid = (hashtext('tidemark.lease')::bigint & 4294967295)::oid AND objid = (hashtext($1)::bigint & 4294967295)::oid`,
    [key, mode],
  );
  return Number(rows.rows[0]?.n ?? 0);
}

export class PostgresLeaseProvider implements LeaseProvider {
  constructor(
    private readonly url: string,
    private readonly schema: string,
  ) {}

  acquire(pipeline: string, options: LeaseOptions): Promise<Lease> {
    return this.take(pipeline, options, false);
  }

  /**
   * The same advisory lock taken shared (`pg_try_advisory_lock_shared`): Postgres lets shared holders in together and
   * keeps them and an exclusive holder apart. The token is read, not bumped: only an exclusive taking fences.
   */
  acquireShared(pipeline: string, options: LeaseOptions): Promise<Lease> {
    return this.take(pipeline, options, true);
  }

  /** The last exclusive taker from the token table; live while the server holds its advisory lock. */
  async holder(pipeline: string): Promise<LeaseHolder | undefined> {
    const client = await connectPostgres(this.url, 'tidemark-lease');
    try {
      const table = `${quoteIdent(this.schema)}.${quoteIdent(TABLE)}`;
      const exists = await client.query(`SELECT to_regclass($1) IS NOT NULL AS ok`, [table]);
      if (exists.rows[0]?.ok !== true) return undefined;
      const rows = await client.query(`SELECT token, holder, acquired_at FROM ${table} WHERE pipeline = $1`, [pipeline]);
      const row = rows.rows[0] as { token: string; holder: string; acquired_at: string } | undefined;
      if (row === undefined) return undefined;
      const held = await advisoryHolders(client, `${this.schema}.${pipeline}`, 'ExclusiveLock');
      const who = /^pid (\d+) on (.*)$/.exec(row.holder);
      return {
        token: Number(row.token),
        host: who?.[2] ?? row.holder,
        pid: who ? Number(who[1]) : 0,
        acquiredAt: row.acquired_at,
        expiresAt: null,
        live: held > 0,
      };
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  private async take(pipeline: string, options: LeaseOptions, shared: boolean): Promise<Lease> {
    let client: pg.Client;
    try {
      client = await connectPostgres(this.url, 'tidemark-lease');
    } catch (error) {
      throw new StateError(`cannot take the lease of pipeline ${pipeline}: ${(error as Error).message}`, { context: { pipeline, phase: 'lock' }, cause: error });
    }
    const table = `${quoteIdent(this.schema)}.${quoteIdent(TABLE)}`;
    const key = `${this.schema}.${pipeline}`;
    try {
      await ensureSchema(client, this.schema, quoteIdent(this.schema));
      await createIfMissing(client, `CREATE TABLE IF NOT EXISTS ${table} (pipeline TEXT PRIMARY KEY, token BIGINT NOT NULL, holder TEXT NOT NULL, acquired_at TEXT NOT NULL)`);
      const lock = shared ? 'pg_try_advisory_lock_shared' : 'pg_try_advisory_lock';
      const got = await client.query(`SELECT ${lock}(hashtext('tidemark.lease'), hashtext($1)) AS ok`, [key]);
      if (got.rows[0]?.ok !== true) {
        const holder = await client.query(`SELECT holder, acquired_at FROM ${table} WHERE pipeline = $1`, [pipeline]);
        const h = holder.rows[0] as { holder: string; acquired_at: string } | undefined;
        // Shared holders (partition jobs) leave no row of their own; the server's lock table counts them.
        const sharers = shared ? 0 : await advisoryHolders(client, key, 'ShareLock');
        if (sharers > 0) {
          throw new ConflictError(`pipeline ${pipeline} has ${sharers} partition job(s) running; it runs as a whole once they finish`, { context: { pipeline, phase: 'lock' } });
        }
        const what = shared ? `pipeline ${pipeline} is running exclusively` : `${pipeline.includes('/') ? 'partition' : 'pipeline'} ${pipeline} is already running`;
        throw new ConflictError(`${what} (since ${h?.acquired_at ?? '?'}, ${h?.holder ?? 'another session'})`, {
          context: { pipeline, phase: 'lock' },
        });
      }
      const holder = `pid ${process.pid} on ${hostname()}`;
      const acquiredAt = new Date().toISOString();
      if (shared) {
        const current = await client.query(`SELECT token FROM ${table} WHERE pipeline = $1`, [pipeline]);
        await client.query(`SET idle_session_timeout = ${Math.max(1000, Math.floor(options.ttlMs))}`).catch(() => undefined);
        return new PostgresLease(pipeline, client, table, current.rows.length ? Number(current.rows[0].token) : 0, acquiredAt, options.ttlMs, describeUrl(this.url));
      }
      const row = await client.query(
        `INSERT INTO ${table} AS l (pipeline, token, holder, acquired_at) VALUES ($1, $4, $2, $3)
         ON CONFLICT (pipeline) DO UPDATE SET token = GREATEST(l.token + 1, $4), holder = excluded.holder, acquired_at = excluded.acquired_at RETURNING token`,
        [pipeline, holder, acquiredAt, options.minToken ?? 1],
      );
      // The server ends a session idle longer than the ttl, releasing the lock of a frozen holder.
      await client.query(`SET idle_session_timeout = ${Math.max(1000, Math.floor(options.ttlMs))}`).catch(() => undefined);
      return new PostgresLease(pipeline, client, table, Number(row.rows[0]!.token), acquiredAt, options.ttlMs, describeUrl(this.url));
    } catch (error) {
      await client.end().catch(() => undefined);
      if (error instanceof ConflictError) throw error;
      throw new StateError(`cannot take the lease of pipeline ${pipeline}: ${redact((error as Error).message)}`, { context: { pipeline, phase: 'lock' }, cause: error });
    }
  }
}

/** Two first runs may race to create the table; the loser's "already exists" is success. */
async function createIfMissing(client: pg.Client, ddl: string): Promise<void> {
  try {
    await client.query(ddl);
  } catch (error) {
    const code = (error as { code?: string }).code;
    // Racing creators: the table (42P07), its row type (42710) or the catalog row (23505) already exists.
    if (code !== '42P07' && code !== '42710' && code !== '23505') throw error;
  }
}

class PostgresLease implements Lease {
  private lost: string | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(
    readonly pipeline: string,
    private readonly client: pg.Client,
    private readonly table: string,
    readonly token: number,
    readonly since: string,
    ttlMs: number,
    /** The lease's server in messages (user, host, port, database; never the password). */
    private readonly server: string,
  ) {
    client.on('error', (error) => (this.lost ??= `the lease session of pipeline ${pipeline} with ${server} was lost: ${redact(error.message)}`));
    client.on('end', () => (this.lost ??= `the lease session of pipeline ${pipeline} with ${server} ended`));
    // Keeps the session from being ended as idle while this process is alive and well.
    this.timer = setInterval(() => void this.client.query('SELECT 1').catch(() => undefined), Math.max(100, Math.floor(ttlMs / 3)));
    this.timer.unref();
  }

  async assertHeld(): Promise<void> {
    const fail = (message: string) => new LeaseLostError(message, { context: { pipeline: this.pipeline, phase: 'commit' } });
    if (this.lost !== undefined) throw fail(this.lost);
    let token: number | undefined;
    try {
      const rows = await this.client.query(`SELECT token FROM ${this.table} WHERE pipeline = $1`, [this.pipeline]);
      // A shared lease taken before any exclusive one holds token 0 and finds no row.
      token = rows.rows.length ? Number(rows.rows[0].token) : 0;
    } catch (error) {
      this.lost = `the lease session of pipeline ${this.pipeline} with ${this.server} was lost: ${redact((error as Error).message)}`;
      throw fail(this.lost);
    }
    if (token !== this.token) throw fail(`the lease of pipeline ${this.pipeline} (token ${this.token}) was taken over by token ${token}`);
  }

  async release(): Promise<void> {
    clearInterval(this.timer);
    // Ending the session frees the advisory lock.
    await this.client.end().catch(() => undefined);
  }
}
