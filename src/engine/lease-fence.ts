import type { Destination, Lease, LeaseProvider } from '../core/connector.js';

/**
 * A lock store new to a pipeline (its state moved to another store, a lock directory deleted) hands out tokens from
 * 1, below the fence the destination recorded, and every commit would be refused as a zombie's. Such a lease is
 * taken again above that fence before anything is written. When taking it again fails, the old lease has already
 * been released; releasing it once more (as the caller's cleanup does) is harmless.
 */
export async function aboveFence(provider: LeaseProvider, lease: Lease, destination: Destination, ttlMs: number): Promise<Lease> {
  const fence = (await destination.fenceToken?.(lease.pipeline)) ?? 0;
  if (fence < lease.token) return lease;
  await lease.release();
  return provider.acquire(lease.pipeline, { ttlMs, minToken: fence + 1 });
}
