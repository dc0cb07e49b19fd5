/**
 * A connector's spec, applied before it runs: the config is validated against `connectionSpecification` (one line
 * per problem, naming the key), and the values it marks `airbyte_secret` are found so they can be hidden.
 */
import { createRequire } from 'node:module';
import { ConfigError } from '../../core/errors.js';
import { isJsonObject, JsonNumber, type ExactJson } from '../../shared/exact-json.js';

interface AjvError {
  readonly keyword: string;
  readonly instancePath: string;
  readonly params: Record<string, unknown>;
  readonly message?: string;
}
type Validator = { (data: unknown): boolean; errors?: AjvError[] | null };
type AjvClass = new (options: object) => { compile(schema: object): Validator };

/** ajv (draft-07, what connector specs are written in) loads only when a spec is checked. */
function ajvClass(): AjvClass {
  return (createRequire(import.meta.url)('ajv') as { default: AjvClass }).default;
}

/** Paths of secret fields: `["api_key"]`, `["credentials", "client_secret"]` (wherever oneOf/anyOf nest them). */
export function secretPaths(spec: ExactJson, prefix: readonly string[] = []): string[][] {
  if (!isJsonObject(spec)) return [];
  const out: string[][] = [];
  if (spec.airbyte_secret === true) out.push([...prefix]);
  if (isJsonObject(spec.properties)) {
    for (const [key, property] of Object.entries(spec.properties)) out.push(...secretPaths(property, [...prefix, key]));
  }
  for (const variants of [spec.oneOf, spec.anyOf, spec.allOf]) {
    if (Array.isArray(variants)) for (const variant of variants as ExactJson[]) out.push(...secretPaths(variant, prefix));
  }
  return out;
}

/** The string values found at those paths in a config. */
export function secretValues(config: ExactJson, paths: readonly (readonly string[])[]): string[] {
  const out: string[] = [];
  for (const path of paths) {
    let value: ExactJson | undefined = config;
    for (const step of path) value = isJsonObject(value) ? value[step] : undefined;
    if (typeof value === 'string' && value !== '') out.push(value);
    else if (value instanceof JsonNumber) out.push(value.text);
  }
  return out;
}

/** The config as ajv sees it: exact numbers as JS numbers (only their type and range are checked). */
function plain(value: ExactJson): unknown {
  if (value instanceof JsonNumber) return Number(value.text);
  if (Array.isArray(value)) return value.map((v) => plain(v as ExactJson));
  if (isJsonObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  return value;
}

function plainSpec(spec: ExactJson): unknown {
  const out = plain(spec) as Record<string, unknown>;
  // Draft-04 to 2019 `$schema` URLs would make ajv refuse the whole spec; the keywords connectors use are the same.
  delete out.$schema;
  return out;
}

/** Throws one ConfigError listing each problem as `<where>.<key>: <what>`; values are never shown (they may be secret). */
export function validateConnectorConfig(spec: ExactJson, config: ExactJson, where: string): void {
  if (!isJsonObject(config)) throw new ConfigError(`${where}: the connector's config must be a JSON object`);
  const Ajv = ajvClass();
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  let validate: Validator;
  try {
    validate = ajv.compile(plainSpec(spec) as object);
  } catch (cause) {
    throw new ConfigError(`${where}: the connector's spec is not a usable JSON Schema (${(cause as Error).message})`, { cause });
  }
  if (validate(plain(config))) return;
  const lines = new Set<string>();
  for (const error of validate.errors ?? []) {
    const path = error.instancePath.split('/').filter(Boolean).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
    if (error.keyword === 'required') {
      const missing = (error.params as { missingProperty: string }).missingProperty;
      lines.add(`${[where, ...path, missing].join('.')}: required by the connector's spec`);
    } else if (error.keyword === 'additionalProperties') {
      const extra = (error.params as { additionalProperty: string }).additionalProperty;
      lines.add(`${[where, ...path, extra].join('.')}: not a setting of this connector`);
    } else if (error.keyword === 'oneOf' || error.keyword === 'anyOf' || error.keyword === 'if') {
      continue;
    } else {
      lines.add(`${[where, ...path].join('.')}: ${error.message ?? 'is not valid'}`);
    }
  }
  if (lines.size === 0) lines.add(`${where}: does not match the connector's spec`);
  throw new ConfigError([...lines].join('\n'));
}
