import { resolvePipelines } from '../../config/pipeline-names.js';
import { errorFields, errorMessage } from '../../core/errors.js';
import { ConfigError, catalogProblems, destinationProblems, loadPipeline, pipelineJsonSchema, type PipelineConfig, type StreamConfig } from '../../index.js';
import { preflight } from '../../engine/preflight.js';
import { EXIT } from '../exit-codes.js';
import { print, printError } from '../output.js';

/** Checks every file (a directory: each pipeline in it); a config error in one is printed and the rest still checked. */
export async function validateCommand(inputs: readonly string[], options: { dir?: string; connect?: boolean } = {}): Promise<number> {
  const lakes = new Map<string, string>();
  let code: number = EXIT.ok;
  for (const file of await resolvePipelines(inputs, options.dir !== undefined ? { dir: options.dir } : {})) {
    try {
      const pipeline = await validateFile(file, lakes);
      if (options.connect && !(await connectsCleanly(pipeline, file)) && code === EXIT.ok) code = EXIT.failed;
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      printError(`error: ${errorMessage(error)}`, errorFields(error));
      code = EXIT.usage;
    }
  }
  return code;
}

/** `--connect`: every problem one line, `error: FILE: KEY: what and what to do`; true when there is none. */
async function connectsCleanly(pipeline: PipelineConfig, file: string): Promise<boolean> {
  const problems = await preflight(pipeline);
  for (const p of problems) printError(`error: ${file}: ${p.key}: ${p.message}`, { pipeline: pipeline.name });
  if (problems.length === 0) print(`${file}: pipeline ${pipeline.name} connects: source and destination are ready for a run`);
  return problems.length === 0;
}

async function validateFile(file: string, lakes: Map<string, string>): Promise<PipelineConfig> {
  const pipeline = await loadPipeline(file);
  await checkLake(pipeline, file, lakes);
  const { problems, unchecked } = await catalogProblems(pipeline, file);
  if (problems.length > 0) throw new ConfigError(problems.join('\n'));
  if (unchecked !== undefined) printError(`warn: ${file}: ${unchecked}`);
  print(`${file}: pipeline ${pipeline.name} is valid (${pipeline.streams.map((s) => `${s.name}: ${s.strategy}/${writeOf(s)}`).join(', ')})`);
  return pipeline;
}

/**
 * A lake stream written by two pipelines would lose objects: refused among the files given (`lakes`: location and
 * stream → pipeline) and against the owners recorded in the lake.
 */
async function checkLake(pipeline: PipelineConfig, file: string, lakes: Map<string, string>): Promise<void> {
  const destination = pipeline.destination;
  if (destination.type !== 'files') return;
  const streams = pipeline.streams.map((s) => s.name);
  for (const stream of streams) {
    const key = `${destination.endpoint ?? ''}\u0000${destination.location.replace(/\/+$/, '')}\u0000${stream}`;
    const other = lakes.get(key);
    if (other !== undefined && other !== pipeline.name) {
      throw new ConfigError(`${file}: pipelines ${other} and ${pipeline.name} both write stream ${stream} into ${destination.location}; one would delete the other's objects. Give one stream another name (name:) or another location`);
    }
    lakes.set(key, pipeline.name);
  }
  const problems = await destinationProblems(destination, pipeline.name, streams);
  if (problems.length > 0) throw new ConfigError(`${file}: ${problems.join('; ')}`);
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
