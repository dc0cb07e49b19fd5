import { ConfigError, catalogProblems, loadPipeline, pipelineJsonSchema, type StreamConfig } from '../../index.js';
import { print, printError } from '../output.js';

export async function validateCommand(files: readonly string[]): Promise<number> {
  for (const file of files) {
    const pipeline = await loadPipeline(file);
    const { problems, unchecked } = await catalogProblems(pipeline, file);
    if (problems.length > 0) throw new ConfigError(problems.join('\n'));
    if (unchecked !== undefined) printError(`warn: ${file}: ${unchecked}`);
    print(`${file}: pipeline ${pipeline.name} is valid (${pipeline.streams.map((s) => `${s.name}: ${s.strategy}/${writeOf(s)}`).join(', ')})`);
  }
  return 0;
}

/** The write a run will use; a merge on the table's own key is settled only when the run reads the catalog. */
function writeOf(stream: StreamConfig): string {
  if (stream.sourceKey === 'optional') return "merge on the source's primary key (append without one)";
  return stream.sourceKey === 'required' ? "merge on the source's primary key" : stream.write;
}

export async function schemaCommand(): Promise<number> {
  print(JSON.stringify(pipelineJsonSchema(), null, 2));
  return 0;
}
