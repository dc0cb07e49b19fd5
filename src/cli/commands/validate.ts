import { loadPipeline, pipelineJsonSchema } from '../../index.js';
import { print } from '../output.js';

export async function validateCommand(files: readonly string[]): Promise<number> {
  for (const file of files) {
    const pipeline = await loadPipeline(file);
    print(`${file}: pipeline ${pipeline.name} is valid (${pipeline.streams.map((s) => `${s.name}: ${s.strategy}/${s.write}`).join(', ')})`);
  }
  return 0;
}

export async function schemaCommand(): Promise<number> {
  print(JSON.stringify(pipelineJsonSchema(), null, 2));
  return 0;
}
