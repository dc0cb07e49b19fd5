import { errorMessage, TidemarkError } from '../../core/errors.js';
import { redact, type Logger, type LogLevel } from '../../core/logger.js';
import { airbyteCheck, airbyteSpec, loadAirbyteConfig, readCatalog, runAirbyteWrite } from '../../engine/airbyte-destination/index.js';
import { logMessage, traceError, type AirbyteLogLevel } from '../../engine/airbyte-destination/protocol.js';
import { EXIT, exitCodeFor } from '../exit-codes.js';

export interface AirbyteDestinationOptions {
  readonly config?: string;
  readonly catalog?: string;
}

const LEVELS: Record<LogLevel, AirbyteLogLevel> = { debug: 'DEBUG', info: 'INFO', warn: 'WARN', error: 'ERROR' };
const ORDER: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** Writes one line to stdout and resolves once it is handed to the pipe (an echoed STATE must not run ahead of it). */
function emit(line: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    process.stdout.write(`${line}\n`, (error) => (error ? reject(error) : resolve()));
  });
}

/** tidemark's own log lines as Airbyte LOG messages on stdout, in order with the STATE echoes. */
function airbyteLogger(min: LogLevel = (process.env.TIDEMARK_LOG_LEVEL as LogLevel | undefined) ?? 'info'): Logger {
  return {
    log(level, message) {
      if (ORDER[level] >= ORDER[min]) process.stdout.write(`${logMessage(LEVELS[level], redact(message))}\n`);
    },
  };
}

/**
 * `tidemark airbyte-destination spec|check|write`: every line on stdout is an Airbyte message. A failure is a TRACE
 * error message (config errors as config_error) and a non-zero exit.
 */
export async function airbyteDestinationCommand(action: string, options: AirbyteDestinationOptions): Promise<number> {
  const logger = airbyteLogger();
  try {
    switch (action) {
      case 'spec':
        await emit(airbyteSpec());
        return EXIT.ok;
      case 'check':
        if (!options.config) return await usage('check needs --config <config.json>');
        await emit(await airbyteCheck(options.config, logger));
        return EXIT.ok;
      case 'write': {
        if (!options.config || !options.catalog) return await usage('write needs --config <config.json> and --catalog <configured_catalog.json>');
        const config = await loadAirbyteConfig(options.config);
        const catalog = await readCatalog(options.catalog);
        const result = await runAirbyteWrite(config, catalog, { input: process.stdin, emit, logger });
        for (const s of result.streams) {
          logger.log('info', `${config.pipeline.name}.${s.stream}: ${s.rowsRead} read, ${s.rowsLoaded} loaded, ${s.rowsRejected} rejected in ${s.commits} commit${s.commits === 1 ? '' : 's'}`);
        }
        if (result.records_resent > 0) logger.log('info', `${result.records_resent} records sent again after a restart were already committed and not loaded twice`);
        return EXIT.ok;
      }
      default:
        return await usage(`unknown action ${JSON.stringify(action)} (spec, check or write)`);
    }
  } catch (error) {
    const configError = error instanceof TidemarkError && (error.kind === 'config' || error.kind === 'usage');
    const stack = process.env.TIDEMARK_VERBOSE === '1' && error instanceof Error && error.stack !== undefined ? redact(error.stack) : undefined;
    await emit(traceError(errorMessage(error), configError ? 'config_error' : 'system_error', stack)).catch(() => undefined);
    return exitCodeFor(error);
  }
}

async function usage(message: string): Promise<number> {
  await emit(traceError(`usage: tidemark airbyte-destination ${message}`, 'config_error'));
  return EXIT.usage;
}
