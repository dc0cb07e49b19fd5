import { UsageError, compactLake, loadPipeline, parseByteSize, type CompactResult } from '../../index.js';
import { EXIT } from '../exit-codes.js';
import { formatCount, print, toJson } from '../output.js';

export interface LakeCommandOptions {
  readonly stream?: string;
  readonly targetSize?: string;
  readonly json?: boolean;
}

function show(results: readonly CompactResult[]): void {
  if (results.length === 0) print('(no tables to compact)');
  for (const r of results) {
    const what = r.filesRewritten === 0 ? 'nothing to compact' : `${formatCount(r.filesRewritten)} small files rewritten`;
    print(`${r.stream}  ${formatCount(r.filesBefore)} → ${formatCount(r.filesAfter)} files  ${formatCount(r.bytesBefore)} → ${formatCount(r.bytesAfter)} bytes  (${what})`);
  }
}

/** `tidemark lake compact <pipeline.yaml> [--stream s] [--target-size 128MB] [--json]`. */
export async function lakeCommand(action: string, file: string, options: LakeCommandOptions): Promise<number> {
  if (action !== 'compact') throw new UsageError(`unknown lake action ${JSON.stringify(action)} (expected: compact)`);
  let targetBytes: number | undefined;
  if (options.targetSize !== undefined) {
    targetBytes = parseByteSize(options.targetSize);
    if (targetBytes === undefined) throw new UsageError(`--target-size ${options.targetSize}: expected a size such as 128MB, 512KB or a number of bytes`);
  }
  const pipeline = await loadPipeline(file);
  const results = await compactLake(pipeline, { ...(options.stream !== undefined ? { stream: options.stream } : {}), ...(targetBytes !== undefined ? { targetBytes } : {}) });
  options.json ? print(toJson(results)) : show(results);
  return EXIT.ok;
}
