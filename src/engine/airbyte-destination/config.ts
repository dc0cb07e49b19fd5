/**
 * The config an Airbyte deployment gives `tidemark airbyte-destination` (`--config`, JSON): the destination and
 * state store of a tidemark pipeline file, plus the pipeline name that keys its state and lock. The SPEC message's
 * connectionSpecification is generated from the same zod schema as pipeline files, so the two never drift apart.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { formatIssue } from '../../config/config-issues.js';
import { DEFAULT_CHECKPOINT_ROWS, type PipelineConfig } from '../../config/load.js';
import { NAME_RE } from '../../config/names.js';
import { parsePipeline } from '../../config/parse.js';
import { destinationSchema, stateSchema } from '../../config/schema.js';
import { ConfigError } from '../../core/errors.js';
import { registerSecret } from '../../core/logger.js';
import { registerUrlSecrets } from '../../shared/postgres-client.js';

export const airbyteDestinationConfigSchema = z
  .object({
    name: z
      .string()
      .regex(NAME_RE, 'letters, digits, "_", "-" and "." only, not starting with "." or "-"')
      .refine((s) => !s.includes('..'), 'must not contain ".."')
      .default('airbyte')
      .describe('The pipeline name: keys the state and the lock of this connection (one name per Airbyte connection).'),
    destination: destinationSchema,
    state: stateSchema.default('destination'),
    checkpoint_rows: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(`Commit (and echo the STATE messages) once this many records wait behind a STATE (default ${DEFAULT_CHECKPOINT_ROWS}).`),
    lock_ttl: z.string().optional().describe('The lease of a write, renewed while it runs; a dead write frees it after this long (default 2m).'),
  })
  .strict()
  .describe('tidemark as an Airbyte destination: where records go and where their state is committed.');

export type AirbyteDestinationDocument = z.infer<typeof airbyteDestinationConfigSchema>;

/** Keys whose values are secrets in every tidemark config: hidden by Airbyte's UI and its logs. */
const SECRET_KEYS: ReadonlySet<string> = new Set(['url', 'secret_access_key', 'session_token', 'password', 'token']);

/** The JSON Schema of the config, as the SPEC message's connectionSpecification (draft-07, `airbyte_secret` marks). */
export function connectionSpecification(): Record<string, unknown> {
  const generated = z.toJSONSchema(airbyteDestinationConfigSchema, { io: 'input', target: 'draft-7' }) as Record<string, unknown>;
  const mark = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(mark);
    if (node === null || typeof node !== 'object') return node;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(node)) {
      if (k === 'properties' && v !== null && typeof v === 'object') {
        out[k] = Object.fromEntries(
          Object.entries(v as Record<string, unknown>).map(([prop, schema]) => [prop, SECRET_KEYS.has(prop) ? { ...(mark(schema) as object), airbyte_secret: true } : mark(schema)]),
        );
      } else out[k] = mark(v);
    }
    return out;
  };
  return { ...(mark(generated) as Record<string, unknown>), title: 'tidemark destination' };
}

export interface AirbyteDestinationConfig {
  readonly pipeline: PipelineConfig;
  readonly checkpointRows: number;
}

/** Reads, checks and resolves `--config`: one-line errors naming the key; secret values are registered first. */
export async function loadAirbyteConfig(file: string, env: NodeJS.ProcessEnv = process.env): Promise<AirbyteDestinationConfig> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (cause) {
    throw new ConfigError(`cannot read ${file}: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, { cause });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (cause) {
    throw new ConfigError(`${file}: not JSON (${(cause as Error).message})`, { cause });
  }
  registerSecrets(raw);
  const parsed = airbyteDestinationConfigSchema.safeParse(raw);
  if (!parsed.success) throw new ConfigError(`${file}: ${formatIssue(parsed.error.issues[0]!, airbyteDestinationConfigSchema, raw)}`);
  const { checkpoint_rows: checkpointRows, ...pipeline } = parsed.data;
  // The same resolution as a `tidemark target` file: `${env:…}`, defaults, paths relative to the config file.
  const resolved = parsePipeline(JSON.stringify(pipeline), { file, env, target: true });
  return { pipeline: resolved, checkpointRows: checkpointRows ?? DEFAULT_CHECKPOINT_ROWS };
}

function registerSecrets(value: unknown, key?: string): void {
  if (typeof value === 'string' && key !== undefined && SECRET_KEYS.has(key)) {
    if (key === 'url') registerUrlSecrets(value);
    else registerSecret(value);
    return;
  }
  if (Array.isArray(value)) value.forEach((v) => registerSecrets(v));
  else if (value !== null && typeof value === 'object') for (const [k, v] of Object.entries(value)) registerSecrets(v, k);
}
