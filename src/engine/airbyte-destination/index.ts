/** tidemark as an Airbyte destination: `spec`, `check` and `write` (see write.ts for the commit and echo rule). */
import { readFile } from 'node:fs/promises';
import { ConfigError, errorMessage } from '../../core/errors.js';
import { silentLogger, type Logger } from '../../core/logger.js';
import { openPipelineDestination } from '../state-sync.js';
import { connectionSpecification, loadAirbyteConfig } from './config.js';
import { connectionStatus, DESTINATION_SYNC_MODES, parseCatalog, type CatalogStream } from './protocol.js';

export { runAirbyteWrite, type AirbyteWriteOptions, type AirbyteWriteResult } from './write.js';
export { loadAirbyteConfig, connectionSpecification, type AirbyteDestinationConfig } from './config.js';
export { parseCatalog, type CatalogStream } from './protocol.js';

/** The SPEC message. */
export function airbyteSpec(): string {
  return JSON.stringify({
    type: 'SPEC',
    spec: {
      connectionSpecification: connectionSpecification(),
      supportsIncremental: true,
      supportsNormalization: false,
      supportsDBT: false,
      supported_destination_sync_modes: DESTINATION_SYNC_MODES,
    },
  });
}

/**
 * The CONNECTION_STATUS message of `check`: the config is valid and the destination (and a separate state store)
 * opens. A failure is a status, not an error: its message is one line, secrets hidden.
 */
export async function airbyteCheck(configFile: string, logger: Logger = silentLogger): Promise<string> {
  try {
    const config = await loadAirbyteConfig(configFile);
    const destination = await openPipelineDestination(config.pipeline, logger);
    try {
      await destination.state.load(config.pipeline.name);
    } finally {
      await destination.close();
    }
    return connectionStatus(true, `${config.pipeline.destination.type} destination reachable; pipeline ${config.pipeline.name}`);
  } catch (error) {
    return connectionStatus(false, errorMessage(error).split('\n')[0]!);
  }
}

export async function readCatalog(file: string): Promise<CatalogStream[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (cause) {
    throw new ConfigError(`cannot read ${file}: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, { cause });
  }
  return parseCatalog(text);
}
