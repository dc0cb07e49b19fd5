/**
 * Pipelines named by their `name:`, as `dataspoc-pipe run pg-orders` names them: looked up in a pipelines folder
 * (`--dir`, else $TIDEMARK_PIPELINES_DIR, else ./pipelines when it exists, else the working directory).
 */
import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { UsageError } from '../core/errors.js';
import { pipelineFiles } from './pipeline-files.js';

export const PIPELINES_DIR_ENV = 'TIDEMARK_PIPELINES_DIR';
export const DEFAULT_PIPELINES_DIR = 'pipelines';

/** The folder names are looked up in. */
export async function pipelinesDir(dir?: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (dir !== undefined) return dir;
  const fromEnv = env[PIPELINES_DIR_ENV];
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  const info = await stat(DEFAULT_PIPELINES_DIR).catch(() => undefined);
  return info?.isDirectory() ? DEFAULT_PIPELINES_DIR : '.';
}

/**
 * Pipeline files for each input: a file as given, a folder's `*.yaml`/`*.yml`, or a pipeline's `name:` looked up in
 * the pipelines folder. No input: every pipeline of that folder.
 */
export async function resolvePipelines(inputs: readonly string[], options: { dir?: string; env?: NodeJS.ProcessEnv } = {}): Promise<string[]> {
  let named: Promise<Map<string, string[]>> | undefined;
  const byName = async (): Promise<{ dir: string; names: Map<string, string[]> }> => {
    const dir = await pipelinesDir(options.dir, options.env);
    return { dir, names: await (named ??= pipelineNames(dir)) };
  };
  // Every file of the folder, named or not: a broken one is reported by the command rather than skipped unseen.
  if (inputs.length === 0) return pipelineFiles([await pipelinesDir(options.dir, options.env)]);
  const files: string[] = [];
  for (const input of inputs) {
    if ((await stat(input).catch(() => undefined)) !== undefined || looksLikePath(input)) {
      files.push(...(await pipelineFiles([input])));
      continue;
    }
    const { dir, names } = await byName();
    const found = names.get(input);
    if (found === undefined) {
      const known = [...names.keys()].sort();
      throw new UsageError(`no pipeline named ${input} in ${dir} (${known.length ? `pipelines: ${known.join(', ')}` : 'it holds no pipeline files'}); give a file, a folder, --dir or ${PIPELINES_DIR_ENV}`);
    }
    if (found.length > 1) throw new UsageError(`pipeline name ${input} is used by ${found.join(' and ')}; give the file, or give one of them another name:`);
    files.push(found[0]!);
  }
  return [...new Set(files)];
}

/** Exactly one pipeline file for commands that act on one (`--config <file | name>`). */
export async function resolvePipeline(input: string, options: { dir?: string } = {}): Promise<string> {
  const files = await resolvePipelines([input], options);
  if (files.length !== 1) throw new UsageError(`${input} holds ${files.length} pipelines; name one of them`);
  return files[0]!;
}

function looksLikePath(input: string): boolean {
  return input.includes('/') || input.includes('\\') || /\.ya?ml$/i.test(input);
}

/** name → the files of a folder that carry it (more than one only by mistake, refused when that name is asked for). */
async function pipelineNames(dir: string): Promise<Map<string, string[]>> {
  const entries = await readdir(dir).catch(() => [] as string[]);
  const names = new Map<string, string[]>();
  for (const entry of entries.filter((f) => /\.ya?ml$/i.test(f) && !f.startsWith('.')).sort()) {
    const file = join(dir, entry);
    const name = topLevelName(await readFile(file, 'utf8'));
    if (name !== undefined) names.set(name, [...(names.get(name) ?? []), file]);
  }
  return names;
}

/**
 * The top-level `name:` of a pipeline file, read without the YAML parser (its load costs more than a no-op run's
 * share); a file that has none is not a pipeline this lookup can find.
 */
function topLevelName(text: string): string | undefined {
  const match = /^name:[ \t]*(?:"([^"\n]*)"|'([^'\n]*)'|([^\s#'"][^#\n]*?))[ \t]*(?:#.*)?$/m.exec(text);
  return match === null ? undefined : (match[1] ?? match[2] ?? match[3]);
}
