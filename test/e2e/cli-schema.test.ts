/** `tidemark schema` as an editor and a validator read it, checked against every example pipeline we ship. */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { configReference } from '../../src/config/config-reference.js';
import { cli } from '../helpers/cli.js';
import { tempDir } from '../helpers/fs.js';
import { jsonSchemaValidator } from '../helpers/json-schema.js';

const ROOT = new URL('../../', import.meta.url);
type Node = Record<string, unknown>;

/** Every `properties` entry without a description, as a path; `if` clauses only test a tag and need none. */
function undescribed(node: unknown, at = ''): string[] {
  if (node === null || typeof node !== 'object') return [];
  return Object.entries(node as Node).flatMap(([key, value]) => {
    if (key === 'if') return [];
    const own = key === 'properties' ? Object.entries(value as Record<string, Node>).filter(([, p]) => typeof p.description !== 'string' || p.description.length === 0).map(([k]) => `${at}.${k}`) : [];
    return [...own, ...undescribed(value, key === 'properties' ? at : `${at}/${key}`)];
  });
}

/** Complete pipelines (name, source, streams) in the ```yaml blocks of README.md and docs/. */
async function documentedPipelines(): Promise<{ where: string; doc: unknown }[]> {
  const docs = await readdir(new URL('docs/', ROOT), { recursive: true }).catch(() => [] as string[]);
  const pages = ['README.md', ...docs.filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  const found: { where: string; doc: unknown }[] = [];
  for (const page of pages) {
    const text = await readFile(new URL(page, ROOT), 'utf8');
    for (const [i, block] of [...text.matchAll(/```ya?ml\n([\s\S]*?)```/g)].entries()) {
      const doc = parseOrNull(block[1]!);
      if (doc !== null && typeof doc === 'object' && 'name' in doc && 'source' in doc && 'streams' in doc) found.push({ where: `${page} block ${i + 1}`, doc });
    }
  }
  return found;
}

/** A block that is not one YAML document (alternatives side by side) is no pipeline example. */
function parseOrNull(text: string): Node | null {
  try {
    return parse(text) as Node | null;
  } catch {
    return null;
  }
}

describe('tidemark schema', () => {
  let schema: Node;
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir());
    const out = await cli(['schema']);
    expect(out.code, out.stderr).toBe(0);
    schema = JSON.parse(out.stdout) as Node;
  });
  afterAll(() => cleanup());

  it('is draft-07 (what editors read), with an $id, a title and a description for every key', () => {
    expect(schema).toMatchObject({ $schema: 'http://json-schema.org/draft-07/schema#', $id: 'urn:tidemark:pipeline', title: 'tidemark pipeline' });
    expect(undescribed(schema)).toEqual([]);
  });

  it('docs/config-reference.md is generated from it and current (npm run docs:config)', async () => {
    const page = await readFile(new URL('docs/config-reference.md', ROOT), 'utf8');
    expect(page).toBe(configReference(schema));
    expect(page).toContain('# yaml-language-server: $schema=./tidemark.schema.json');
    expect(page).toContain('| `streams[].cursor` |');
  });

  describe.skipIf(jsonSchemaValidator === undefined)(`validated by ${jsonSchemaValidator?.name ?? 'a JSON Schema validator'}`, () => {
    const validate = (docs: readonly unknown[]) => jsonSchemaValidator!.validate(schema, docs);

    it('accepts every example pipeline of the README, docs/ and the demo', async () => {
      const examples = await documentedPipelines();
      await cli(['demo', '--dir', join(dir, 'demo')]);
      examples.push({ where: 'tidemark demo', doc: parse(await readFile(join(dir, 'demo', 'pipeline.yaml'), 'utf8')) });
      expect(examples.length).toBeGreaterThanOrEqual(2);
      const errors = validate(examples.map((e) => e.doc));
      expect(examples.map((e, i) => [e.where, errors[i]])).toEqual(examples.map((e) => [e.where, []]));
    });

    it('checks a tagged section against the branch its type names, and takes ${env:…} in a port', () => {
      const pipeline = (source: Node) => ({ name: 'p', source, streams: [{ table: 't' }] });
      const [unknownKey, placeholder, badType] = validate([
        pipeline({ type: 'postgres', url: 'postgres://h/d', prot: 5 }),
        pipeline({ type: 'postgres', host: 'h', port: '${env:PGPORT}', database: 'd' }),
        pipeline({ type: 'postgre', url: 'postgres://h/d' }),
      ]);
      expect(unknownKey).toHaveLength(1);
      expect(unknownKey![0]!.at).toBe('/source');
      expect(unknownKey![0]!.message).toMatch(/prot/);
      expect(placeholder).toEqual([]);
      expect(badType!.map((e) => e.at)).toEqual(['/source/type']);
    });
  });
});
