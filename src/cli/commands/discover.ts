import { discoverStreams, loadPipeline, type DiscoveredStream } from '../../index.js';
import { resolvePipelines } from '../../config/pipeline-names.js';
import { print, toJson } from '../output.js';

export interface DiscoverCommandOptions {
  readonly json?: boolean;
  readonly dir?: string;
}

/** Every stream the pipeline's source offers; `--json`: one array of them. */
export async function discoverCommand(input: string, options: DiscoverCommandOptions): Promise<number> {
  const [file] = await resolvePipelines([input], options.dir !== undefined ? { dir: options.dir } : {});
  const pipeline = await loadPipeline(file!);
  const streams = await discoverStreams(pipeline);
  if (options.json) {
    print(toJson(streams));
    return 0;
  }
  print(`${pipeline.name}: ${streams.length} stream(s) offered by its ${pipeline.source.type} source`);
  for (const s of streams) printStream(s);
  return 0;
}

function printStream(s: DiscoveredStream): void {
  print(`${s.name} (${s.origin}${s.configured !== undefined ? `, in the pipeline as ${s.configured}` : ''})`);
  print(`  modes: ${s.modes.join(', ')}`);
  print(`  key: ${s.keyCandidates.map((k) => k.join(', ')).join(' | ') || '(none declared)'}`);
  print(`  cursor candidates: ${s.cursorCandidates.join(', ') || '(none)'}`);
  print(`  fields: ${s.fields.map((f) => `${f.name} ${f.type}`).join(', ')}`);
}
