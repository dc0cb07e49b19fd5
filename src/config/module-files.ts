import { extname } from 'node:path';

/** The file extensions `loadPipeline` imports as pipeline modules (`export default definePipeline(…)`) instead of reading as YAML. */
const MODULE_EXTENSIONS: ReadonlySet<string> = new Set(['.js', '.mjs', '.cjs', '.ts', '.mts', '.cts']);

export function isPipelineModule(file: string): boolean {
  return MODULE_EXTENSIONS.has(extname(file).toLowerCase());
}
