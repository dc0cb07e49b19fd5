/**
 * One-line messages for schema errors: the dot-path, what is expected there in words taken from the schema, what was
 * written, and a "did you mean" among the allowed keys or values. zod's own texts ("Invalid input") name neither.
 */
import type { z } from 'zod';

type Schema = z.core.$ZodType;
type Issue = z.core.$ZodIssue;
type Def = z.core.$ZodTypeDef & Record<string, unknown>;

const def = (schema: Schema): Def => schema._zod.def as Def;

/** `streams[0].cursor`: the path as a user would write it to find the key. */
function dotPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>((acc, part) => (typeof part === 'number' ? `${acc}[${part}]` : acc ? `${acc}.${String(part)}` : String(part)), '');
}

export function formatIssue(issue: Issue, schema?: Schema, input?: unknown): string {
  const path = [...issue.path];
  const node = schema && resolveAt(schema, path, input);
  const value = valueAt(input, path);
  let text: string;
  switch (issue.code) {
    case 'unrecognized_keys': {
      const key = issue.keys[0]!;
      const allowed = node ? keysOf(node, value) : [];
      path.push(key);
      text = `unknown key${hint(key, allowed, 'allowed keys')}`;
      break;
    }
    case 'invalid_value':
      text = `${shown(value)} is not allowed; expected ${oneOf(issue.values.map(String))}${hint(String(value), issue.values.map(String))}`;
      break;
    case 'invalid_union': {
      const { note, options: tags } = issue as { note?: string; options?: readonly unknown[] };
      if (note === 'No matching discriminator' && tags !== undefined) {
        const options = tags.map(String);
        text = value === undefined ? `missing; expected ${oneOf(options)}` : `unknown type ${shown(value)}; expected ${oneOf(options)}${hint(String(value), options)}`;
        break;
      }
      return unionIssue(issue, node, value, path, schema, input);
    }
    case 'invalid_type':
      text = value === undefined ? `missing; expected ${node ? expected(node) : issue.expected}` : `expected ${node ? expected(node) : issue.expected}, got ${shown(value)}`;
      break;
    case 'too_small':
    case 'too_big':
      text = boundText(issue, value);
      break;
    default:
      text = issue.message.replace(/^Invalid input: /, '');
  }
  return `${dotPath(path) || '(document)'}: ${text}`;
}

function boundText(issue: Extract<Issue, { code: 'too_small' | 'too_big' }>, value: unknown): string {
  const small = issue.code === 'too_small';
  const limit = Number(small ? (issue as { minimum: number | bigint }).minimum : (issue as { maximum: number | bigint }).maximum);
  const inclusive = issue.inclusive !== false;
  if (issue.origin === 'array') return small ? `needs at least ${limit} ${limit === 1 ? 'entry' : 'entries'}` : `takes at most ${limit} entries`;
  if (issue.origin === 'string') return small && limit === 1 ? 'must not be empty' : `expected ${small ? 'at least' : 'at most'} ${limit} characters, got ${shown(value)}`;
  return `expected a number ${small ? (inclusive ? '>=' : '>') : inclusive ? '<=' : '<'} ${limit}, got ${shown(value)}`;
}

/** A union: the branch the value was meant for when one is (an object for an object branch), else every branch. */
function unionIssue(issue: Extract<Issue, { code: 'invalid_union' }>, node: Schema | undefined, value: unknown, path: PropertyKey[], schema: Schema | undefined, input: unknown): string {
  const meant = issue.errors.filter((branch) => branch.length > 0 && !branch.every((i) => i.path.length === 0 && (i.code === 'invalid_type' || i.code === 'invalid_value')));
  if (meant.length === 1) {
    const inner = meant[0]![0]!;
    return formatIssue({ ...inner, path: [...path, ...inner.path] } as Issue, schema, input);
  }
  const words = node ? expected(node) : 'another value';
  const literals = node ? literalsOf(node) : [];
  return `${dotPath(path) || '(document)'}: expected ${words}, got ${shown(value)}${typeof value === 'string' ? hint(value, literals) : ''}`;
}

/** The schema that holds the value at `path`, choosing among union branches by the value written there. */
function resolveAt(schema: Schema, path: readonly PropertyKey[], input: unknown): Schema | undefined {
  let node: Schema | undefined = schema;
  let value = input;
  for (const part of path) {
    node = node && branchFor(unwrap(node), value);
    if (node === undefined) return undefined;
    const d = def(node);
    if (d.type === 'object') node = Object.hasOwn(d.shape as object, String(part)) ? (d.shape as Record<string, Schema>)[String(part)] : undefined;
    else if (d.type === 'array') node = d.element as Schema;
    else if (d.type === 'record') node = d.valueType as Schema;
    else return undefined;
    value = valueAt(value, [part]);
  }
  return node && unwrap(node);
}

function unwrap(schema: Schema): Schema {
  let node = schema;
  for (;;) {
    const d = def(node);
    if (d.type === 'optional' || d.type === 'default' || d.type === 'prefault' || d.type === 'nullable' || d.type === 'readonly') node = d.innerType as Schema;
    else if (d.type === 'pipe') node = d.in as Schema;
    else return node;
  }
}

function branchFor(schema: Schema, value: unknown): Schema | undefined {
  const d = def(schema);
  if (d.type !== 'union') return schema;
  const options = (d.options as Schema[]).map(unwrap);
  const tag = typeof d.discriminator === 'string' && isRecord(value) ? value[d.discriminator] : undefined;
  const tagged = options.find((o) => tag !== undefined && literalsOf(fieldOf(o, d.discriminator as string)).includes(String(tag)));
  const shaped = options.find((o) => (isRecord(value) ? ['object', 'record', 'union'] : Array.isArray(value) ? ['array'] : []).includes(def(o).type));
  const chosen = tagged ?? shaped;
  return chosen && branchFor(chosen, value);
}

function fieldOf(schema: Schema, key: string): Schema | undefined {
  const d = def(schema);
  const field = d.type === 'object' && Object.hasOwn(d.shape as object, key) ? (d.shape as Record<string, Schema>)[key] : undefined;
  return field && unwrap(field);
}

function keysOf(schema: Schema, value: unknown): string[] {
  const node = branchFor(schema, value);
  return node && def(node).type === 'object' ? Object.keys(def(node).shape as object) : [];
}

function literalsOf(schema: Schema | undefined): string[] {
  if (schema === undefined) return [];
  const d = def(schema);
  if (d.type === 'literal') return (d.values as unknown[]).map(String);
  if (d.type === 'enum') return Object.values(d.entries as Record<string, unknown>).map(String);
  if (d.type === 'union') return (d.options as Schema[]).flatMap((o) => literalsOf(unwrap(o)));
  return [];
}

/** What a schema accepts, in words: `a string or a list of strings`, `"destination" or a map with type: file | sqlite`. */
function expected(schema: Schema): string {
  const d = def(schema);
  switch (d.type) {
    case 'string':
      return 'a string';
    case 'number':
      return (schema as z.ZodNumber).isInt ? 'an integer' : 'a number';
    case 'boolean':
      return 'true or false';
    case 'literal':
    case 'enum':
      return oneOf(literalsOf(schema));
    case 'array': {
      const element = unwrap(d.element as Schema);
      return def(element).type === 'string' ? 'a list of strings' : 'a list';
    }
    case 'union': {
      if (typeof d.discriminator === 'string') return `a map with ${d.discriminator}: ${(d.options as Schema[]).flatMap((o) => literalsOf(fieldOf(unwrap(o), d.discriminator as string))).join(' | ')}`;
      return [...new Set((d.options as Schema[]).map((o) => expected(unwrap(o))))].join(' or ');
    }
    case 'object':
    case 'record':
      return 'a map';
    default:
      return d.type;
  }
}

function oneOf(values: readonly string[]): string {
  return values.length === 1 ? JSON.stringify(values[0]) : `one of ${values.join(', ')}`;
}

function hint(word: string, candidates: readonly string[], listName?: string): string {
  const guess = closest(word, candidates);
  if (guess !== undefined) return `; did you mean ${guess}?`;
  return listName !== undefined && candidates.length > 0 ? ` (${listName}: ${candidates.join(', ')})` : '';
}

/**
 * The allowed word a user most likely meant: one that starts the written word or is started by it
 * (`cursor_column` → `cursor`), else the nearest by edit distance when it is close enough to be a typo.
 */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  const lower = word.toLowerCase();
  const prefixed = candidates.filter((c) => c.length >= 3 && (lower.startsWith(c.toLowerCase()) || c.toLowerCase().startsWith(lower)) && lower.length >= 3);
  if (prefixed.length > 0) return prefixed.sort((a, b) => b.length - a.length)[0];
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const c of candidates) {
    const distance = levenshtein(lower, c.toLowerCase());
    if (distance < bestDistance) [best, bestDistance] = [c, distance];
  }
  return bestDistance <= Math.max(word.length >= 4 ? 2 : 1, Math.floor(word.length / 3)) ? best : undefined;
}

function levenshtein(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i += 1) {
    const current = [i];
    for (let j = 1; j <= b.length; j += 1) current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    previous = current;
  }
  return previous[b.length]!;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const part of path) value = isRecord(value) || Array.isArray(value) ? (value as Record<PropertyKey, unknown>)[part] : undefined;
  return value;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function shown(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}…` : text;
}
