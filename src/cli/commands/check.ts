import { checkSource, loadPipeline } from '../../index.js';
import { stderrLogger } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { print, toJson } from '../output.js';

/** Prints the connector's connection status; exits 1 when it is FAILED. */
export async function checkCommand(file: string, options: { json?: boolean }): Promise<number> {
  const pipeline = await loadPipeline(file);
  const result = await checkSource(pipeline, stderrLogger());
  if (options.json) print(toJson(result));
  else print(`${pipeline.name}: ${result.status}${result.message !== undefined ? `: ${result.message}` : ''}`);
  return result.status === 'SUCCEEDED' ? EXIT.ok : EXIT.failed;
}
