import { loadTargetPipeline, runTarget } from '../../index.js';
import { stderrLogger } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { formatCount, printError } from '../output.js';

export interface TargetCommandOptions {
  readonly config?: string;
}

/**
 * `some-tap | tidemark target --config p.yaml`: stdout carries only the committed STATE lines (the Singer
 * contract), so the summary goes to stderr.
 */
export async function targetCommand(options: TargetCommandOptions): Promise<number> {
  if (!options.config) {
    printError('usage: some-tap | tidemark target --config <pipeline.yaml>');
    return EXIT.usage;
  }
  const pipeline = await loadTargetPipeline(options.config);
  const result = await runTarget(pipeline, {
    input: process.stdin,
    emitState: (line) =>
      new Promise<void>((resolve, reject) => {
        process.stdout.write(`${line}\n`, (error) => (error ? reject(error) : resolve()));
      }),
    logger: stderrLogger(),
  });
  for (const s of result.streams) {
    printError(`${pipeline.name}.${s.stream}: ${formatCount(s.rowsRead)} read, ${formatCount(s.rowsLoaded)} loaded, ${formatCount(s.rowsRejected)} rejected in ${s.commits} commit${s.commits === 1 ? '' : 's'}`);
  }
  return result.ok ? EXIT.ok : EXIT.failed;
}
