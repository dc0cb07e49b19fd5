/**
 * The written → checked half of config loading: YAML into a document, `${env:…}` resolved, validated with zod
 * (errors with a dot-path). Loaded only when a pipeline file is not in the validated-document cache (load.ts).
 */
import { dirname, resolve } from 'node:path';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import { formatIssue } from './config-issues.js';
import { ConfigError } from '../core/errors.js';
import { redact } from '../core/logger.js';
import { registerUrlSecrets } from '../shared/url-secrets.js';
import { ENV_RE, applyCoercions, interpolate, resolvePipeline, resolveStateStore, type Coercion, type PipelineConfig } from './load.js';
import { pipelineSchema, stateSchema, targetPipelineSchema, type PipelineDocument, type StateConfig } from './schema.js';

/** Whether a pipeline file names a source (a file without one is a `tidemark target` file). */
export function hasSource(text: string): boolean {
  return parseDocument(text).get('source') !== undefined;
}

/** The checked document, and where a `${env:…}` placeholder was read as a number or boolean. */
export function validateText(text: string, options: { where: string; env: NodeJS.ProcessEnv; target: boolean }): { doc: PipelineDocument; coercions: Coercion[] } {
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
  const schema = options.target ? targetPipelineSchema : pipelineSchema;
  const interpolated = interpolate(raw, options.env, where, '');
  const { parsed, coercions } = parseCoercingPlaceholders(schema, raw, interpolated);
  if (!parsed.success) throw new ConfigError(`${where}: ${formatIssue(parsed.error.issues[0]!, schema, interpolated)}`);
  return { doc: parsed.data, coercions };
}

/**
 * `port: "${env:PGPORT}"`: a placeholder is text, but where the schema expects a number or a boolean the text it
 * became is read as one. Only there: a placeholder in a string field stays a string, whatever it holds.
 */
function parseCoercingPlaceholders<T extends z.ZodType>(schema: T, raw: unknown, interpolated: unknown): { parsed: ReturnType<T['safeParse']>; coercions: Coercion[] } {
  const coercions: Coercion[] = [];
  let doc = interpolated;
  for (;;) {
    const parsed = schema.safeParse(doc) as ReturnType<T['safeParse']>;
    if (parsed.success) return { parsed, coercions };
    const found = parsed.error.issues.flatMap((issue): Coercion[] => {
      if (issue.code !== 'invalid_type' || (issue.expected !== 'number' && issue.expected !== 'boolean')) return [];
      const written = at(raw, issue.path);
      const path = issue.path as (string | number)[];
      return typeof written === 'string' && new RegExp(ENV_RE.source).test(written) && typeof at(doc, path) === 'string' ? [{ path, to: issue.expected === 'number' ? 'number' : 'boolean' }] : [];
    });
    const next = applyCoercions(doc, found);
    // Nothing converted (the text is not a number): the error stands.
    if (JSON.stringify(next) === JSON.stringify(doc)) return { parsed, coercions };
    coercions.push(...found);
    doc = next;
  }
}

function at(value: unknown, path: readonly PropertyKey[]): unknown {
  return path.reduce<unknown>((v, part) => (v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[part] : undefined), value);
}

/** Parses pipeline text that did not come from a file (tests, library users); never cached. */
export function parsePipeline(text: string, options: { file?: string; env?: NodeJS.ProcessEnv; baseDir?: string; target?: boolean } = {}): PipelineConfig {
  const where = options.file ?? '<inline>';
  const { doc } = validateText(text, { where, env: options.env ?? process.env, target: options.target === true });
  const baseDir = options.baseDir ?? (options.file ? dirname(resolve(options.file)) : process.cwd());
  return resolvePipeline(doc, where, baseDir, options.file);
}


/**
 * A state store named on the command line (`tidemark state migrate --from … --to …`): `destination`,
 * `file:<dir>`, `sqlite:<file>`, `postgres://…[?schema=<name>]`, or the same as a JSON object. Relative paths are
 * taken from `baseDir`.
 */
export interface BucketAccess {
  readonly endpoint?: string;
  readonly region?: string;
}

/**
 * Endpoint and region of an `s3://` store named on the command line: the flags, else the AWS SDK's own environment
 * variables. Credentials are not copied: the SDK's credential chain reads AWS_ACCESS_KEY_ID and the others itself.
 */
export function bucketAccessOf(given: BucketAccess, env: NodeJS.ProcessEnv = process.env): BucketAccess {
  const endpoint = given.endpoint ?? env.AWS_ENDPOINT_URL_S3 ?? env.AWS_ENDPOINT_URL;
  const region = given.region ?? env.AWS_REGION ?? env.AWS_DEFAULT_REGION;
  return { ...(endpoint ? { endpoint } : {}), ...(region ? { region } : {}) };
}

export function parseStateSpec(spec: string, baseDir: string = process.cwd(), access: BucketAccess = {}): StateConfig {
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
    registerUrlSecrets(text);
    const url = new URL(text);
    const schema = url.searchParams.get('schema');
    url.searchParams.delete('schema');
    raw = { type: 'postgres', url: url.toString(), ...(schema ? { schema } : {}) };
  } else if (/^s3:\/\//i.test(text)) {
    raw = { type: 'bucket', location: text, ...access };
  } else {
    const m = /^(file|sqlite|bucket):(.+)$/.exec(text);
    if (!m) throw new ConfigError(`state store ${JSON.stringify(redact(text))}: expected destination, file:<dir>, sqlite:<file>, bucket:<dir>, s3://bucket/prefix, postgres://… or a JSON object`);
    raw = m[1] === 'bucket' ? { type: 'bucket', location: m[2] } : { type: m[1], path: m[2] };
  }
  const parsed = stateSchema.safeParse(raw);
  if (!parsed.success) throw new ConfigError(`state store ${JSON.stringify(redact(text))}: ${formatIssue(parsed.error.issues[0]!, stateSchema, raw)}`);
  return parsed.data === 'destination' ? parsed.data : resolveStateStore(parsed.data, baseDir);
}
