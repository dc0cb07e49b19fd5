/**
 * Sources written in code (`source: {type: code, module}`): a module whose generator reads the fixture from a JSON
 * file the cell rewrites. `code-sorted` yields pages sorted by `(cursor, id)` from the watermark on, inclusively (so
 * it re-sends the watermark's group every run) and claims `ordered`; `code-resume` yields pages in an order unrelated
 * to the cursor, each followed by a resume point (its page number), so a killed read resumes from its last committed
 * page. A bad value is a text in the int64 column `big`: a reject.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FixtureRow } from '../fixture.js';
import type { SourceAdapter } from '../types.js';
import { tableInstance } from './table-source.js';

const LIBRARY = new URL('../../../dist/index.js', import.meta.url).href;

function moduleText(rowsFile: string, ordered: boolean): string {
  return `import { readFileSync } from 'node:fs';
import { codeSource, defineStream, resumeAt } from ${JSON.stringify(LIBRARY)};
const ordered = ${ordered};
const key = (r) => ordered ? r.updated_at + '|' + r.id.padStart(12, '0') : String((Number(r.id) * 7919) % 10007).padStart(6, '0');
export const source = codeSource({ streams: [defineStream({
  name: 'items', primaryKey: 'id', cursor: 'updated_at', ordered,
  columns: { id: 'int64', updated_at: 'timestamptz', big: 'int64', amount: 'decimal(38,6)', note: 'text' },
  async *read({ since, resume }) {
    const rows = JSON.parse(readFileSync(${JSON.stringify(rowsFile)}, 'utf8'))
      .filter((r) => since === undefined || !ordered || r.updated_at >= since)
      .sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
    for (let page = typeof resume === 'number' ? resume : 0; page * 250 < rows.length; page += 1) {
      yield rows.slice(page * 250, page * 250 + 250);
      if (!ordered) yield resumeAt(page + 1);
    }
  },
})] });
`;
}

function codeAdapter(name: string, ordered: boolean): SourceAdapter {
  return {
    name,
    validate: () => undefined,
    async setup(ctx) {
      const rowsFile = join(ctx.dir, 'rows.json');
      const module = join(ctx.dir, 'source.mjs');
      await writeFile(module, moduleText(rowsFile, ordered));
      const current = new Map<bigint, Record<string, string | null>>();
      const save = () => writeFile(rowsFile, JSON.stringify([...current.values()]));
      const record = (r: FixtureRow) => ({ id: String(r.id), updated_at: `${r.updated_at.replace(' ', 'T')}Z`, big: String(r.big), amount: r.amount, note: r.note });
      return tableInstance(
        {
          sourceYaml: `  type: code\n  module: ${JSON.stringify(module)}\n  export: source`,
          table: 'items',
          async upsert(rows) {
            for (const r of rows) current.set(r.id, record(r));
            await save();
          },
          async breakRow(id) {
            current.set(id, { ...current.get(id)!, big: 'not a number' });
            await save();
            return { kind: 'reject', rows: 1 };
          },
          async close() {},
        },
        true,
      );
    },
  };
}

export const codeSources: readonly SourceAdapter[] = [codeAdapter('code-sorted', true), codeAdapter('code-resume', false)];
