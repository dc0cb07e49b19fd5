/**
 * `tidemark lake compact`: a lake's small part files rewritten into fewer, larger ones, under the pipeline lease
 * (so no run commits meanwhile), in one commit of the files destination (see its `compact`).
 */
import type { Destination } from '../core/connector.js';
import { UsageError } from '../core/errors.js';
import { failpoint } from '../core/failpoints.js';
import type { PipelineConfig } from '../config/load.js';
import type { CompactOptions, CompactResult } from '../destinations/files/files-destination.js';
import { leaseProviderFor, openDestination } from '../registry/index.js';
import { aboveFence } from './lease-fence.js';

export { parseByteSize } from '../shared/byte-size.js';

export type { CompactResult } from '../destinations/files/files-destination.js';

/** The part of a files destination compaction needs (a destination that has it is a lake). */
interface Compactor {
  compact(pipeline: string, options: CompactOptions): Promise<CompactResult[]>;
}

function isCompactor(destination: Destination): destination is Destination & Compactor {
  return typeof (destination as Partial<Compactor>).compact === 'function';
}

export interface CompactLakeOptions {
  readonly stream?: string;
  /** Default: the destination's `compact_target_size` (128 MB). */
  readonly targetBytes?: number;
}

export async function compactLake(pipeline: PipelineConfig, options: CompactLakeOptions = {}): Promise<CompactResult[]> {
  if (pipeline.destination.type !== 'files') throw new UsageError(`pipeline ${pipeline.name} writes to ${pipeline.destination.type}, not a lake (type: files); there is nothing to compact`);
  if (options.stream !== undefined && !pipeline.streams.some((s) => s.name === options.stream)) {
    throw new UsageError(`pipeline ${pipeline.name} has no stream ${options.stream} (streams: ${pipeline.streams.map((s) => s.name).join(', ')})`);
  }
  const provider = leaseProviderFor(pipeline.destination, pipeline.state);
  let lease = await provider.acquire(pipeline.name, { ttlMs: pipeline.lockTtlMs });
  try {
    await failpoint('lock.after_acquire');
    const destination = await openDestination(pipeline.destination);
    try {
      if (!isCompactor(destination)) throw new UsageError(`the destination of pipeline ${pipeline.name} cannot compact`);
      lease = await aboveFence(provider, lease, destination, pipeline.lockTtlMs);
      const held = lease;
      return await destination.compact(pipeline.name, {
        ...(options.stream !== undefined ? { stream: options.stream } : {}),
        ...(options.targetBytes !== undefined ? { targetBytes: options.targetBytes } : {}),
        fence: held.token,
        verify: () => held.assertHeld(),
      });
    } finally {
      await destination.close();
    }
  } finally {
    await lease.release();
  }
}
