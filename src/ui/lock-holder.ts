/**
 * Who holds a pipeline's lease, read from the lease files (`<destination>.locks/<pipeline>/lease-*.json`, see
 * src/state/file/file-lease.ts). Reading never takes or renews the lease, and works while the holder has the
 * database file open.
 */
import { readdir, readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { leaseDirectory, type PipelineConfig } from '../index.js';

type DestinationConfig = PipelineConfig['destination'];

export interface LockHolder {
  readonly token: number;
  readonly host: string;
  readonly pid: number;
  readonly acquiredAt: string;
  readonly expiresAt: string;
  /** Held now: not released, not expired, and (on this host) its process is alive. */
  readonly live: boolean;
}

const FILE_RE = /^lease-(\d{12})\.json$/;

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The latest lease record, or null when the pipeline never ran or its lease files are unreadable. */
export async function readLockHolder(destination: DestinationConfig, pipeline: string): Promise<LockHolder | null> {
  if (!('path' in destination)) return null;
  const dir = join(leaseDirectory(destination), pipeline);
  let files: string[];
  try {
    files = await readdir(dir);
  } catch {
    return null;
  }
  const latest = files
    .map((f) => FILE_RE.exec(f))
    .filter((m): m is RegExpExecArray => m !== null)
    .sort((a, b) => Number(b[1]) - Number(a[1]))[0];
  if (!latest) return null;
  try {
    const record = JSON.parse(await readFile(join(dir, latest[0]), 'utf8')) as {
      token: number; host: string; pid: number; acquiredAt: string; expiresAt: number; released: boolean;
    };
    const live = !record.released && record.expiresAt > Date.now() && !(record.host === hostname() && !processAlive(record.pid));
    return {
      token: Number(record.token),
      host: String(record.host),
      pid: Number(record.pid),
      acquiredAt: String(record.acquiredAt),
      expiresAt: new Date(record.expiresAt).toISOString(),
      live,
    };
  } catch {
    // The holder renews by rename, so a torn read is not expected; an unreadable file just shows no holder.
    return null;
  }
}
