/**
 * Who holds a pipeline's lease, read from the lease files (`<destination>.locks/<pipeline>/lease-*.json`, see
 * src/state/file/file-lease.ts). Reading never takes or renews the lease, and works while the holder has the
 * database file open.
 */
import { join } from 'node:path';
import { isLive, latest } from '../state/file/file-lease.js';
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

/** The latest lease record, or null when the pipeline never ran or its lease files are unreadable. */
export async function readLockHolder(destination: DestinationConfig, pipeline: string): Promise<LockHolder | null> {
  if (!('path' in destination)) return null;
  const dir = join(leaseDirectory(destination), pipeline);
  // The holder renews by rename, so a torn read is not expected; an unreadable file just shows no holder.
  const record = await latest(dir).catch(() => undefined);
  if (!record) return null;
  return {
    token: Number(record.token),
    host: String(record.host),
    pid: Number(record.pid),
    acquiredAt: String(record.acquiredAt),
    expiresAt: new Date(record.expiresAt).toISOString(),
    live: isLive(record),
  };
}
