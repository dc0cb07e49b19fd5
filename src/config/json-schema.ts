/**
 * The JSON Schema of pipeline files (`tidemark schema`), shaped for editors: unions keyed by `type` become
 * `if`/`then` pairs, so a validator checks only the branch the document names (a postgres source is never reported
 * against the sqlite branch), and a number or boolean may also be a `${env:NAME}` placeholder, as the loader allows.
 */
import { z } from 'zod';
import { pipelineSchema } from './schema.js';

/** The schema's identifier; editors key their cache on it. */
const PIPELINE_SCHEMA_ID = 'urn:tidemark:pipeline';

type Node = Record<string, unknown>;

const ENV_PLACEHOLDER: Node = { type: 'string', pattern: '^\\$\\{env:[A-Za-z_][A-Za-z0-9_]*\\}$', description: 'A `${env:NAME}` placeholder, read from the environment when the pipeline loads.' };

export function pipelineJsonSchema(): Node {
  const generated = z.toJSONSchema(pipelineSchema, { io: 'input', target: 'draft-7' }) as Node;
  const { $schema, ...body } = generated;
  return { $schema, $id: PIPELINE_SCHEMA_ID, title: 'tidemark pipeline', ...(shape(body) as Node) };
}

function shape(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(shape);
  if (node === null || typeof node !== 'object') return node;
  const shaped = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, shape(v)])) as Node;
  const tagged = Array.isArray(shaped.oneOf) ? taggedUnion(shaped.oneOf as Node[]) : undefined;
  if (tagged !== undefined) {
    const { oneOf: _replaced, ...rest } = shaped;
    return { ...rest, ...tagged };
  }
  return acceptsPlaceholder(shaped);
}

/** The tag values of a union member: `type`'s `const` or `enum`; undefined when the member is not tagged. */
function tagsOf(member: Node): string[] | undefined {
  const type = (member.properties as Record<string, Node> | undefined)?.type;
  if (type === undefined) return undefined;
  if (typeof type.const === 'string') return [type.const];
  return Array.isArray(type.enum) ? (type.enum as string[]) : undefined;
}

function taggedUnion(members: readonly Node[]): Node | undefined {
  const tags = members.map(tagsOf);
  if (tags.some((t) => t === undefined)) return undefined;
  const all = tags.flat() as string[];
  return {
    type: 'object',
    required: ['type'],
    properties: { type: { enum: all, description: `One of ${all.join(', ')}; selects the keys that follow.` } },
    allOf: members.map((member, i) => {
      const t = tags[i]!;
      return { if: { required: ['type'], properties: { type: t.length === 1 ? { const: t[0] } : { enum: t } } }, then: member };
    }),
  };
}

/** `port: "${env:PGPORT}"` is valid: the loader coerces an interpolated text where a number or boolean is expected. */
function acceptsPlaceholder(node: Node): Node {
  if (node.type !== 'integer' && node.type !== 'number' && node.type !== 'boolean') return node;
  const { description, default: fallback, ...value } = node;
  return {
    ...(description !== undefined ? { description } : {}),
    ...(fallback !== undefined ? { default: fallback } : {}),
    anyOf: [value, ENV_PLACEHOLDER],
  };
}
