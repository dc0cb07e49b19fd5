/**
 * What a target run (`tidemark target`, `tidemark airbyte-destination write`) holds while records come in on stdin:
 * the pipeline's lease, taken above the destination's recorded fence, and the opened destination.
 */
import type { Destination, Lease } from '../core/connector.js';
import { withContext } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import type { PipelineConfig } from '../config/load.js';
import { leaseProviderFor } from '../registry/index.js';
import { aboveFence } from './lease-fence.js';
import { openPipelineDestination } from './state-sync.js';

export async function withTargetSession<T>(pipeline: PipelineConfig, logger: Logger, work: (destination: Destination, lease: Lease) => Promise<T>): Promise<T> {
  const leases = leaseProviderFor(pipeline.destination, pipeline.state);
  let lease = await leases.acquire(pipeline.name, { ttlMs: pipeline.lockTtlMs });
  try {
    const destination = await openPipelineDestination(pipeline, logger).catch((e: unknown) => {
      throw withContext(e, { pipeline: pipeline.name, phase: 'connect' }, 'destination');
    });
    try {
      lease = await aboveFence(leases, lease, destination, pipeline.lockTtlMs);
      return await work(destination, lease);
    } finally {
      await destination.close();
    }
  } finally {
    await lease.release();
  }
}
