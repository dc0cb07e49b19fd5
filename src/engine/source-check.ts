/**
 * `tidemark check`: asks the pipeline's source whether it can connect, in the source's own terms. Airbyte
 * connectors answer with their `check` command (after their config passed their spec).
 */
import type { PipelineConfig } from '../config/load.js';
import { UsageError } from '../core/errors.js';
import { silentLogger, type Logger } from '../core/logger.js';
import { openSource } from '../registry/index.js';

export interface SourceCheck {
  readonly pipeline: string;
  readonly status: 'SUCCEEDED' | 'FAILED';
  readonly message?: string;
}

export async function checkSource(pipeline: PipelineConfig, logger: Logger = silentLogger): Promise<SourceCheck> {
  if (pipeline.source.type !== 'airbyte') {
    throw new UsageError(`tidemark check runs an Airbyte connector's check; pipeline ${pipeline.name} has a ${pipeline.source.type} source (use tidemark plan to see what it would read)`);
  }
  const source = await openSource(pipeline.source, logger);
  try {
    const result = await (source as import('../sources/airbyte/airbyte-source.js').AirbyteSource).check();
    return { pipeline: pipeline.name, ...result };
  } finally {
    await source.close();
  }
}
