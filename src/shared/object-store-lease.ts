/**
 * Pipeline leases and compare-and-set on an object store, for the files destination and the bucket state store.
 *
 * A lease is a set of small objects `<prefix>/<pipeline>/lease-<token>.json`: taking the lease means creating the
 * object of the next token with a create-only write (`If-None-Match: *`), so exactly one contender wins each token
 * and a zombie holder of an older token can always be told apart. Renewals replace the holder's own object with
 * `If-Match: <etag>`. All of this is only safe where the server honours conditional writes; some S3-compatible
 * servers (s3rver, older MinIO/Ceph releases) silently ignore them. `probeConditionalWrites` finds out once per
 * location, and the lease provider refuses to lock on a server that ignores them instead of pretending.
 */
import { hostname } from 'node:os';
import type { Lease, LeaseHolder, LeaseProvider, LeaseOptions } from '../core/connector.js';
import { ConfigError, ConflictError, LeaseLostError } from '../core/errors.js';
import { randomHex } from '../core/ids.js';
import type { ObjectStore } from './object-store.js';
import { holderGone, processScope } from './process.js';

const probed = new Map<string, Promise<boolean>>();

/**
 * Whether the store refuses a create-only write on an existing key and a replace with a stale ETag. Asked once per
 * location per process; the probe objects are removed again.
 */
export function probeConditionalWrites(store: ObjectStore): Promise<boolean> {
  const key = store.describe('');
  let answer = probed.get(key);
  if (answer === undefined) {
    answer = runProbe(store);
    probed.set(key, answer);
    answer.catch(() => probed.delete(key));
  }
  return answer;
}

async function runProbe(store: ObjectStore): Promise<boolean> {
  const key = `_tidemark/probe/${process.pid}-${randomHex(16)}.json`;
  try {
    const first = await store.put(key, '{"probe":1}', { ifNoneMatch: '*' });
    let honoured = false;
    try {
      await store.put(key, '{"probe":2}', { ifNoneMatch: '*' });
    } catch (error) {
      if (!(error instanceof ConflictError)) throw error;
      honoured = true;
    }
    if (!honoured) return false;
    try {
      await store.put(key, '{"probe":3}', { ifMatch: `${first.etag ?? 'x'}-stale` });
      return false;
    } catch (error) {
      if (!(error instanceof ConflictError)) throw error;
      return true;
    }
  } finally {
    await store.delete(key).catch(() => undefined);
  }
}

/** The message for a server that ignores conditional writes: what to configure instead. */
export function unsafeLockingMessage(store: ObjectStore, what: string): string {
  return (
    `${store.describe('')} ignores conditional writes (If-None-Match / If-Match), so ${what} there could let two runs ` +
    `commit at once; tidemark refuses to lock a pipeline in it. Keep the lock in a store that can: add ` +
    `\`lock: {type: file, path: …}\` (or type sqlite / postgres) to this section, or keep state in a file, SQLite or ` +
    `Postgres store (\`state: {type: sqlite, path: …}\`)`
  );
}

interface LeaseRecord {
  readonly token: number;
  readonly host: string;
  readonly pid: number;
  readonly acquiredAt: string;
  readonly expiresAt: number;
  readonly released: boolean;
  /** Where `pid` means something (`processScope`); absent in objects of older versions. */
  readonly scope?: string;
}

const LEASE_RE = /^lease-(\d{12})\.json$/;

function leaseName(token: number): string {
  return `lease-${String(token).padStart(12, '0')}.json`;
}

/** Leases as objects under `<prefix>/<pipeline>/`; refuses to work on a server that ignores conditional writes. */
export class ObjectStoreLeaseProvider implements LeaseProvider {
  constructor(
    private readonly store: ObjectStore,
    private readonly prefix: string,
  ) {}

  async acquire(pipeline: string, options: LeaseOptions): Promise<Lease> {
    if (!(await probeConditionalWrites(this.store))) {
      // A configuration problem: the same pipeline works once the lock is kept elsewhere.
      throw new ConfigError(unsafeLockingMessage(this.store, 'a lease'), { context: { pipeline, phase: 'lock' } });
    }
    const dir = `${this.prefix}/${pipeline}/`;
    const current = await latestLease(this.store, dir);
    if (current && leaseLive(current.record)) {
      const { acquiredAt, pid, host, expiresAt } = current.record;
      throw new ConflictError(`pipeline ${pipeline} is already running (since ${acquiredAt}, pid ${pid} on ${host}; its lease expires in ${leaseLeft(expiresAt - Date.now())} unless renewed)`, {
        context: { pipeline, phase: 'lock' },
      });
    }
    const token = Math.max((current?.record.token ?? 0) + 1, options.minToken ?? 1);
    const record: LeaseRecord = { token, host: hostname(), pid: process.pid, scope: processScope(), acquiredAt: new Date().toISOString(), expiresAt: Date.now() + options.ttlMs, released: false };
    let etag: string | undefined;
    try {
      etag = (await this.store.put(`${dir}${leaseName(token)}`, JSON.stringify(record), { ifNoneMatch: '*' })).etag;
    } catch (error) {
      if (!(error instanceof ConflictError)) throw error;
      throw new ConflictError(`pipeline ${pipeline} is already running (another run took lease token ${token} just now)`, { context: { pipeline, phase: 'lock' }, cause: error });
    }
    // Older lease objects are only history; the one before is kept for messages.
    if (current && current.record.token < token - 1) await this.store.delete(current.key).catch(() => undefined);
    for await (const info of this.store.list(dir)) {
      const m = LEASE_RE.exec(info.key.slice(dir.length));
      if (m && Number(m[1]) < token - 1) await this.store.delete(info.key).catch(() => undefined);
    }
    return new ObjectStoreLease(this.store, pipeline, dir, record, etag, options.ttlMs);
  }

  async holder(pipeline: string): Promise<LeaseHolder | undefined> {
    const current = await latestLease(this.store, `${this.prefix}/${pipeline}/`);
    if (current === undefined) return undefined;
    const { token, host, pid, acquiredAt, expiresAt } = current.record;
    return { token, host, pid, acquiredAt, expiresAt: new Date(expiresAt).toISOString(), live: leaseLive(current.record) };
  }
}

/** Held now: not released, not expired, and its process not provably gone (`holderGone`) — a dead one is taken over at once. */
function leaseLive(record: LeaseRecord): boolean {
  return !record.released && record.expiresAt > Date.now() && !holderGone(record);
}

/** `4m 10s`, `12s`: what a refused run is told about the holder's lease. */
export function leaseLeft(ms: number): string {
  const s = Math.max(1, Math.ceil(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  return s % 60 === 0 ? `${m}m` : `${m}m ${s % 60}s`;
}

async function latestLease(store: ObjectStore, dir: string): Promise<{ key: string; record: LeaseRecord; etag?: string } | undefined> {
  let best: { key: string; token: number } | undefined;
  for await (const info of store.list(dir)) {
    const m = LEASE_RE.exec(info.key.slice(dir.length));
    if (m && (best === undefined || Number(m[1]) > best.token)) best = { key: info.key, token: Number(m[1]) };
  }
  if (!best) return undefined;
  const got = await store.get(best.key);
  if (!got) return undefined;
  let record: LeaseRecord;
  try {
    record = JSON.parse(Buffer.from(got.body).toString('utf8')) as LeaseRecord;
  } catch {
    // A damaged lease object still claims its token; it is treated as expired, never as a lower token.
    record = { token: best.token, host: '?', pid: 0, acquiredAt: got.info.modified, expiresAt: 0, released: true };
  }
  return { key: best.key, record, ...(got.info.etag !== undefined ? { etag: got.info.etag } : {}) };
}

class ObjectStoreLease implements Lease {
  readonly token: number;
  readonly since: string;
  private readonly timer: NodeJS.Timeout;
  private lost: string | undefined;

  constructor(
    private readonly store: ObjectStore,
    readonly pipeline: string,
    private readonly dir: string,
    private record: LeaseRecord,
    private etag: string | undefined,
    private readonly ttlMs: number,
  ) {
    this.token = record.token;
    this.since = record.acquiredAt;
    this.timer = setInterval(() => void this.renew(), Math.max(50, Math.floor(ttlMs / 3)));
    this.timer.unref();
  }

  private async write(record: LeaseRecord): Promise<void> {
    const info = await this.store.put(`${this.dir}${leaseName(record.token)}`, JSON.stringify(record), this.etag !== undefined ? { ifMatch: this.etag } : {});
    this.record = record;
    this.etag = info.etag;
  }

  private async renew(): Promise<void> {
    if (this.lost !== undefined) return;
    try {
      await this.check();
      await this.write({ ...this.record, expiresAt: Date.now() + this.ttlMs });
    } catch (error) {
      this.lost = (error as Error).message;
    }
  }

  private async check(): Promise<void> {
    const current = await latestLease(this.store, this.dir);
    if (current?.record.token !== this.token) {
      throw new LeaseLostError(`the lease of pipeline ${this.pipeline} (token ${this.token}) was taken over by token ${current?.record.token}`, {
        context: { pipeline: this.pipeline, phase: 'commit' },
      });
    }
    if (this.record.expiresAt <= Date.now()) {
      throw new LeaseLostError(`the lease of pipeline ${this.pipeline} (token ${this.token}) expired`, { context: { pipeline: this.pipeline, phase: 'commit' } });
    }
  }

  async assertHeld(): Promise<void> {
    if (this.lost !== undefined) throw new LeaseLostError(this.lost, { context: { pipeline: this.pipeline, phase: 'commit' } });
    await this.check();
  }

  async release(): Promise<void> {
    clearInterval(this.timer);
    const current = await latestLease(this.store, this.dir).catch(() => undefined);
    if (current?.record.token === this.token) await this.write({ ...this.record, released: true }).catch(() => undefined);
  }
}
