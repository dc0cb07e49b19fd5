/**
 * What a target run (`tidemark target`, `tidemark airbyte-destination write`) holds while records come in on stdin:
 * the pipeline's lease, taken above the destination's recorded fence, and the opened destination.
 */
import type { Destination, Lease } from '../core/connector.js';
import type { StreamResult, Watermark } from '../core/types.js';
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

/** What a target run moved per stream, summed over the loads of its checkpoints, reported as run results. */
export class TargetTotals {
  private readonly byStream = new Map<string, { read: number; loaded: number; rejected: number; commits: number }>();

  constructor(private readonly startedAt: string) {}

  add(stream: string, result: StreamResult): void {
    const total = this.byStream.get(stream) ?? { read: 0, loaded: 0, rejected: 0, commits: 0 };
    this.byStream.set(stream, {
      read: total.read + result.rowsRead,
      loaded: total.loaded + result.rowsLoaded,
      rejected: total.rejected + result.rowsRejected,
      commits: total.commits + result.commits,
    });
  }

  results(of: (stream: string) => { readonly watermark: Watermark | null; readonly full: boolean }): StreamResult[] {
    return [...this.byStream.entries()].map(([stream, t]) => {
      const { watermark, full } = of(stream);
      const elapsed = Date.now() - Date.parse(this.startedAt);
      return { stream, outcome: 'committed', rowsRead: t.read, rowsLoaded: t.loaded, rowsRejected: t.rejected, commits: t.commits, cursorMin: null, cursorMax: null, watermark, durationMs: elapsed, full };
    });
  }
}
