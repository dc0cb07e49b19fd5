/**
 * The written → checked half of config loading: YAML into a document, `${env:…}` resolved, validated with zod
 * (errors with a dot-path). Loaded only when a pipeline file is not in the validated-document cache (load.ts).
 */
import { dirname, resolve } from 'node:path';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import { ConfigError } from '../core/errors.js';
import { redact, registerSecret } from '../core/logger.js';
import { interpolate, resolvePipeline, resolveStateStore, type PipelineConfig } from './load.js';
import { pipelineSchema, stateSchema, targetPipelineSchema, type PipelineDocument, type StateConfig } from './schema.js';

/** Whether a pipeline file names a source (a file without one is a `tidemark target` file). */
export function hasSource(text: string): boolean {
  return parseDocument(text).get('source') !== undefined;
}

export function validateText(text: string, options: { where: string; env: NodeJS.ProcessEnv; target: boolean }): PipelineDocument {
  const { where } = options;
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    const e = doc.errors[0]!;
    const line = e.linePos?.[0];
    throw new ConfigError(`${where}${line ? `:${line.line}:${line.col}` : ''}: invalid YAML: ${e.message.split('\n')[0]}`);
  }
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 100 });
  } catch (cause) {
    throw new ConfigError(`${where}: invalid YAML: ${(cause as Error).message}`, { cause });
  }
  const interpolated = interpolate(raw, options.env, where, '');
  const parsed = (options.target ? targetPipelineSchema : pipelineSchema).safeParse(interpolated);
  if (!parsed.success) throw new ConfigError(`${where}: ${formatIssue(parsed.error.issues[0]!)}`, { context: { at: where } });
  return parsed.data;
}

/** Parses pipeline text that did not come from a file (tests, library users); never cached. */
export function parsePipeline(text: string, options: { file?: string; env?: NodeJS.ProcessEnv; baseDir?: string; target?: boolean } = {}): PipelineConfig {
  const where = options.file ?? '<inline>';
  const doc = validateText(text, { where, env: options.env ?? process.env, target: options.target === true });
  const baseDir = options.baseDir ?? (options.file ? dirname(resolve(options.file)) : process.cwd());
  return resolvePipeline(doc, where, baseDir, options.file);
}


export function formatIssue(issue: z.core.$ZodIssue): string {
  const path = issue.path.reduce<string>(
    (acc, part) => (typeof part === 'number' ? `${acc}[${part}]` : acc ? `${acc}.${String(part)}` : String(part)),
    '',
  );
  return `${path || '(document)'}: ${issue.message}`;
}

/**
 * A state store named on the command line (`tidemark state migrate --from … --to …`): `destination`,
 * `file:<dir>`, `sqlite:<file>`, `postgres://…[?schema=<name>]`, or the same as a JSON object. Relative paths are
 * taken from `baseDir`.
 */
export function parseStateSpec(spec: string, baseDir: string = process.cwd()): StateConfig {
  const text = spec.trim();
  let raw: unknown;
  if (text === 'destination') raw = text;
  else if (text.startsWith('{')) {
    try {
      raw = JSON.parse(text);
    } catch (cause) {
      throw new ConfigError(`state store ${JSON.stringify(redact(text))}: not valid JSON`, { cause });
    }
  } else if (/^postgres(ql)?:\/\//.test(text)) {
    registerSecret(text);
    const url = new URL(text);
    const schema = url.searchParams.get('schema');
    url.searchParams.delete('schema');
    raw = { type: 'postgres', url: url.toString(), ...(schema ? { schema } : {}) };
  } else if (/^s3:\/\//i.test(text)) {
    raw = { type: 'bucket', location: text };
  } else {
    const m = /^(file|sqlite|bucket):(.+)$/.exec(text);
    if (!m) throw new ConfigError(`state store ${JSON.stringify(redact(text))}: expected destination, file:<dir>, sqlite:<file>, bucket:<dir>, s3://bucket/prefix, postgres://… or a JSON object`);
    raw = m[1] === 'bucket' ? { type: 'bucket', location: m[2] } : { type: m[1], path: m[2] };
  }
  const parsed = stateSchema.safeParse(raw);
  if (!parsed.success) throw new ConfigError(`state store ${JSON.stringify(redact(text))}: ${formatIssue(parsed.error.issues[0]!)}`);
  return parsed.data === 'destination' ? parsed.data : resolveStateStore(parsed.data, baseDir);
}
