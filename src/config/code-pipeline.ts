/**
 * Pipelines made in code: `definePipeline({...})` checks a typed object with the same schema and rules as a
 * pipeline file, and a pipeline module (`.mjs`, `.js`, or `.ts` under a TypeScript loader) exporting one is loaded
 * by `loadPipeline` like a YAML file, so the CLI, the scheduler and queue workers can run it by its path.
 */
import { dirname, isAbsolute, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { z } from 'zod';
import { isCodeSource, type CodeSource } from '../core/code-source.js';
import { ConfigError } from '../core/errors.js';
import { formatIssue } from './config-issues.js';
import { codeStreamEntries, type StreamEntry } from './code-streams.js';
import { interpolate, resolvePipeline, type PipelineConfig } from './load.js';
import { pipelineSchema, type PipelineDocument, type sourceSchema, type streamSchema } from './schema.js';

/** A stream entry as a pipeline file writes it (snake_case keys, as in YAML), with editor completion. */
export type StreamInput = z.input<typeof streamSchema>;

/**
 * A pipeline as an object: the keys of a pipeline file, typed. `source` is a `codeSource(...)` or any source
 * section a file could hold; `streams` may be left out for a code source (then every stream of it is loaded).
 */
export type PipelineInput = Omit<z.input<typeof pipelineSchema>, 'source' | 'streams'> & {
  readonly source: CodeSource | z.input<typeof sourceSchema>;
  readonly streams?: readonly StreamInput[];
};

export interface DefinePipelineOptions {
  /**
   * The module that defines the pipeline (`import.meta.url`): relative paths are taken from its directory, and
   * `PipelineQueue.enqueue` hands it to workers, which import it. Default: relative paths from the working directory.
   */
  readonly module?: string | URL;
  /** Where `${env:NAME}` placeholders are read from (default `process.env`). */
  readonly env?: NodeJS.ProcessEnv;
}

function modulePath(module: string | URL): string {
  const text = module instanceof URL ? module.href : module;
  return text.startsWith('file:') ? fileURLToPath(text) : resolve(text);
}

/** Builds a pipeline from an object, validated like a file; throws a `ConfigError` naming the key. */
export function definePipeline(input: PipelineInput, options: DefinePipelineOptions = {}): PipelineConfig {
  const file = options.module !== undefined ? modulePath(options.module) : undefined;
  const where = file ?? `pipeline ${typeof input?.name === 'string' ? input.name : '<unnamed>'}`;
  if (typeof input !== 'object' || input === null) throw new ConfigError(`${where}: definePipeline takes an object`);
  const code = isCodeSource(input.source) ? input.source : undefined;
  const streams = code !== undefined ? codeStreamEntries(code, input.streams as readonly StreamEntry[] | undefined, where) : input.streams;
  const raw = { ...input, source: code !== undefined ? { type: 'code' } : input.source, ...(streams !== undefined ? { streams } : {}) };
  const interpolated = interpolate(raw, options.env ?? process.env, where, '');
  const parsed = pipelineSchema.safeParse(interpolated);
  if (!parsed.success) throw new ConfigError(`${where}: ${formatIssue(parsed.error.issues[0]!, pipelineSchema, interpolated)}`);
  const doc = code !== undefined ? withDefinition(parsed.data, code) : parsed.data;
  return resolvePipeline(doc, where, file !== undefined ? dirname(file) : process.cwd(), file);
}

function withDefinition(doc: PipelineDocument, definition: CodeSource): PipelineDocument {
  // The streams are functions, not settings: they ride beside the checked document, which the schema never sees.
  return { ...doc, source: { ...doc.source, definition } as unknown as PipelineDocument['source'] };
}

type Importer = (specifier: string) => Promise<Record<string, unknown>>;
/**
 * The ES module loader: the CLI bundle turns every `import()` it holds into a `require`, which cannot load a user's
 * `.mjs`, so bin/tidemark.js hands its own `import()` over; the library (an ES module) imports directly.
 */
const nativeImport: Importer = (globalThis as { [key: symbol]: Importer | undefined })[Symbol.for('tidemark.import')] ?? ((specifier) => import(specifier) as Promise<Record<string, unknown>>);

async function importModule(path: string, where: string): Promise<Record<string, unknown>> {
  try {
    return await nativeImport(pathToFileURL(path).href);
  } catch (cause) {
    const hint = /\.[cm]?ts$/i.test(path) ? ' (a .ts module needs a TypeScript loader, such as node --import tsx; or compile it to .mjs)' : '';
    throw new ConfigError(`${where}: cannot import ${path}: ${(cause as Error).message}${hint}`, { cause });
  }
}

/** A pipeline module: its default export (or `pipeline`), made by `definePipeline`. */
export async function loadPipelineModule(file: string): Promise<PipelineConfig> {
  const path = resolve(file);
  const module = await importModule(path, file);
  const pipeline = (module.default ?? module.pipeline) as Partial<PipelineConfig> | undefined;
  if (typeof pipeline !== 'object' || pipeline === null || typeof pipeline.name !== 'string' || !Array.isArray(pipeline.streams)) {
    throw new ConfigError(`${file}: a pipeline module exports its pipeline as default (export default definePipeline({...}))`);
  }
  return { ...(pipeline as PipelineConfig), file: pipeline.file ?? path };
}

/** A pipeline file's `source: {type: code, module}`: the module is imported and its export becomes the source. */
export async function withCodeModule(doc: PipelineDocument, file: string, baseDir: string): Promise<PipelineDocument> {
  const source = doc.source;
  if (source.type !== 'code') return doc;
  if (source.module === undefined) throw new ConfigError(`${file}: source.module: a code source in a pipeline file names the module that exports it (module: ./orders-source.mjs)`);
  const path = isAbsolute(source.module) ? source.module : resolve(baseDir, source.module);
  const name = source.export ?? 'default';
  const module = await importModule(path, `${file}: source.module`);
  if (!(name in module)) throw new ConfigError(`${file}: source.export: ${source.module} has no export ${name} (exports: ${Object.keys(module).join(', ') || 'none'})`);
  const exported = module[name];
  if (!isCodeSource(exported)) throw new ConfigError(`${file}: source.module: export ${name} of ${source.module} is not a codeSource(...)`);
  return withDefinition({ ...doc, source: { ...source, module: path }, streams: codeStreamEntries(exported, doc.streams as readonly StreamEntry[], file) as PipelineDocument['streams'] }, exported);
}
