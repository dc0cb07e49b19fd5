import { checkSource, loadPipeline } from '../../index.js';
import { stderrLogger } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { print, printError, toJson } from '../output.js';

/**
 * Checks the pipeline's source as a run will need it (see src/engine/source-check.ts): prints `NAME: SUCCEEDED`, or
 * `NAME: FAILED` with one `error: KEY: …` line per problem on stderr, exit 1. `--json`: the result with its problems.
 */
export async function checkCommand(file: string, options: { json?: boolean }): Promise<number> {
  const pipeline = await loadPipeline(file);
  const result = await checkSource(pipeline, stderrLogger());
  if (options.json) print(toJson(result));
  else {
    print(`${pipeline.name}: ${result.status}`);
    for (const p of result.problems) printError(`error: ${p.key}: ${p.message}`, { pipeline: pipeline.name });
  }
  return result.status === 'SUCCEEDED' ? EXIT.ok : EXIT.failed;
}
