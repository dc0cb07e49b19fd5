/**
 * Who holds a pipeline's lease, read from wherever its lock lives (lease files beside a database file, a state
 * store, a Postgres advisory lock, lease objects in a bucket; see `leaseProviderFor`). Reading never takes or renews
 * the lease, and works while the holder has the database file open.
 */
import type { LeaseHolder } from '../core/connector.js';
import type { PipelineConfig } from '../index.js';
import { leaseProviderFor } from '../registry/index.js';

export type LockHolder = LeaseHolder;

/** The newest lease record, or null when the pipeline never ran or its lock store cannot be read. */
export async function readLockHolder(config: PipelineConfig): Promise<LockHolder | null> {
  const provider = leaseProviderFor(config.destination, config.state);
  return (await provider.holder?.(config.name).catch(() => undefined)) ?? null;
}
