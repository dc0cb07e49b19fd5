/** `tidemark ui`: serve the dashboard until interrupted. */
import { UsageError } from '../../index.js';
import { DEFAULT_PORT, isLoopback, startDashboard } from '../../ui/ui-server.js';
import { print, printError } from '../output.js';
import { enablePrometheusText } from '../../telemetry/telemetry.js';

export interface UiCommandOptions {
  readonly port?: string;
  /** Undefined unless given on the command line: only an explicit --host may leave loopback. */
  readonly host?: string;
  readonly allowActions?: boolean;
}

export async function uiCommand(inputs: readonly string[], options: UiCommandOptions): Promise<number> {
  const port = options.port === undefined ? DEFAULT_PORT : Number(options.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new UsageError(`--port: expected 0…65535, got ${options.port}`);
  const host = options.host ?? '127.0.0.1';
  const dashboard = await startDashboard({
    inputs: inputs.length ? inputs : ['.'],
    port,
    host,
    allowNonLoopback: options.host !== undefined,
    allowActions: options.allowActions === true,
    metrics: await enablePrometheusText(),
  });
  if (!isLoopback(host)) printError(`warning: serving on ${host}, not loopback: anyone who can reach it can read pipeline state`);
  print(`tidemark ui: ${dashboard.url} (${options.allowActions ? 'actions enabled' : 'read-only'}; Ctrl-C to stop)`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await dashboard.close();
  return 0;
}
