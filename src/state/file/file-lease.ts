/**
 * A lease lock kept in a directory of small files, one per fencing token. Taking the lease means creating the file
 * of the next token with an atomic link (exactly one contender can), so tokens only grow and a zombie holder of an
 * older token can always be told apart. A holder whose process is gone (same host) is taken over at once;
 * otherwise the lease must expire first.
 *
 * File calls are synchronous on purpose: a lease is a few tiny files in a local directory, each call takes
 * microseconds, where a thread-pool round trip queued behind a busy event loop took milliseconds (a run makes about
 * a dozen, and every commit checks the lease twice).
 */
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Lease, LeaseHolder, LeaseProvider, LeaseOptions } from '../../core/connector.js';
import { ConflictError, LeaseLostError } from '../../core/errors.js';
import { randomHex } from '../../core/ids.js';
import { holderGone, processScope } from '../../shared/process.js';

/** One lease file: who holds which fencing token, since when, until when. */
export interface LeaseRecord {
  readonly token: number;
  readonly host: string;
  readonly pid: number;
  readonly acquiredAt: string;
  readonly expiresAt: number;
  readonly released: boolean;
  /** Where `pid` means something (`processScope`); absent in files of older versions. */
  readonly scope?: string;
}

/** What a lease file that cannot be read is taken for: released, so a new run may take the next token. */
function tornRecord(token: number): LeaseRecord {
  return { token, host: '?', pid: 0, acquiredAt: '?', expiresAt: 0, released: true };
}

const FILE_RE = /^lease-(\d{12})\.json$/;

function fileName(token: number): string {
  return `lease-${String(token).padStart(12, '0')}.json`;
}

export class FileLeaseProvider implements LeaseProvider {
  constructor(private readonly directory: string) {}

  async holder(pipeline: string): Promise<LeaseHolder | undefined> {
    // The holder renews by rename, so a torn read is not expected; an unreadable directory just shows no holder.
    const record = await latest(join(this.directory, pipeline)).catch(() => undefined);
    if (record === undefined) return undefined;
    const { token, host, pid, acquiredAt } = record;
    return { token, host, pid, acquiredAt, expiresAt: new Date(record.expiresAt).toISOString(), live: isLive(record) };
  }

  async acquire(pipeline: string, options: LeaseOptions): Promise<Lease> {
    const dir = join(this.directory, pipeline);
    mkdirSync(dir, { recursive: true });
    const current = await latest(dir, options.onWarning);
    if (current && isLive(current)) {
      throw new ConflictError(
        `pipeline ${pipeline} is already running (since ${current.acquiredAt}, pid ${current.pid} on ${current.host})`,
        { context: { pipeline, phase: 'lock' } },
      );
    }
    const token = Math.max((current?.token ?? 0) + 1, options.minToken ?? 1);
    const record: LeaseRecord = {
      token,
      host: hostname(),
      pid: process.pid,
      acquiredAt: new Date().toISOString(),
      expiresAt: Date.now() + options.ttlMs,
      released: false,
      scope: processScope(),
    };
    const tmp = writeTemp(dir, record);
    try {
      linkSync(tmp, join(dir, fileName(token)));
      syncDirectory(dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const winner = await latest(dir);
      throw new ConflictError(
        `pipeline ${pipeline} is already running (since ${winner?.acquiredAt ?? 'just now'}, pid ${winner?.pid ?? '?'} on ${winner?.host ?? '?'})`,
        { context: { pipeline, phase: 'lock' } },
      );
    } finally {
      unlinkQuietly(tmp);
    }
    prune(dir, token);
    return new FileLease(pipeline, dir, record, options.ttlMs);
  }
}

/** Held now: not released, not expired, and its process not provably gone (`holderGone`). */
export function isLive(record: LeaseRecord): boolean {
  return !record.released && record.expiresAt > Date.now() && !holderGone(record);
}

/**
 * The newest lease record of a pipeline's lease directory (the highest token), if any. A file that is empty or not
 * a whole record is taken as released (see the module comment); `warn` hears which file.
 */
export async function latest(dir: string, warn?: (message: string) => void): Promise<LeaseRecord | undefined> {
  const tokens = readdirSync(dir)
    .map((f) => FILE_RE.exec(f))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]))
    .sort((a, b) => b - a);
  if (tokens.length === 0) return undefined;
  const file = join(dir, fileName(tokens[0]!));
  const text = readFileSync(file, 'utf8');
  let damage: string;
  try {
    const record = JSON.parse(text) as LeaseRecord;
    if (typeof record?.token === 'number' && typeof record.expiresAt === 'number') return record;
    damage = 'not a lease record';
  } catch {
    damage = text.trim() === '' ? 'empty' : 'not valid JSON';
  }
  warn?.(`lease file ${file} is ${damage} (torn by a crash or power loss?): taken as released; the next lease gets token ${tokens[0]! + 1}`);
  return tornRecord(tokens[0]!);
}

/** A lease record in a new temp file of `dir`, synced to disk, ready to be linked or renamed into place. */
function writeTemp(dir: string, record: LeaseRecord): string {
  const tmp = join(dir, `.tmp-${process.pid}-${randomHex(6)}`);
  const fd = openSync(tmp, 'w');
  try {
    const bytes = Buffer.from(JSON.stringify(record));
    for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return tmp;
}

/** Makes a link or rename in `dir` durable. */
function syncDirectory(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function prune(dir: string, keepFrom: number): void {
  for (const f of readdirSync(dir)) {
    const m = FILE_RE.exec(f);
    if (m && Number(m[1]) < keepFrom - 1) unlinkQuietly(join(dir, f));
  }
}

function unlinkQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // already gone
  }
}

class FileLease implements Lease {
  readonly token: number;
  readonly since: string;
  private record: LeaseRecord;
  private readonly timer: NodeJS.Timeout;
  private lost: string | undefined;

  constructor(
    readonly pipeline: string,
    private readonly dir: string,
    record: LeaseRecord,
    private readonly ttlMs: number,
  ) {
    this.record = record;
    this.token = record.token;
    this.since = record.acquiredAt;
    this.timer = setInterval(() => void this.renew(), Math.max(50, Math.floor(ttlMs / 3)));
    this.timer.unref();
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

  private async write(record: LeaseRecord): Promise<void> {
    const tmp = writeTemp(this.dir, record);
    try {
      renameSync(tmp, join(this.dir, fileName(record.token)));
    } catch (error) {
      unlinkQuietly(tmp);
      throw error;
    }
    syncDirectory(this.dir);
    this.record = record;
  }

  private async check(): Promise<void> {
    const current = await latest(this.dir);
    if (current?.token !== this.token) {
      throw new LeaseLostError(`the lease of pipeline ${this.pipeline} (token ${this.token}) was taken over by token ${current?.token}`, {
        context: { pipeline: this.pipeline, phase: 'commit' },
      });
    }
    if (this.record.expiresAt <= Date.now()) {
      throw new LeaseLostError(`the lease of pipeline ${this.pipeline} (token ${this.token}) expired`, {
        context: { pipeline: this.pipeline, phase: 'commit' },
      });
    }
  }

  async assertHeld(): Promise<void> {
    if (this.lost !== undefined) throw new LeaseLostError(this.lost, { context: { pipeline: this.pipeline, phase: 'commit' } });
    await this.check();
  }

  async release(): Promise<void> {
    clearInterval(this.timer);
    const current = await latest(this.dir).catch(() => undefined);
    if (current?.token === this.token) await this.write({ ...this.record, released: true }).catch(() => undefined);
  }
}
