/**
 * `columns:` / `exclude:` on connector streams, with the Airbyte fixture connector and a Singer tap: the destination
 * table holds only the picked fields, across several checkpoints and a second incremental run; naming a field the
 * connector does not send, or dropping the key, is refused with the stream's fields named.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { sqliteQuery } from '../helpers/warehouse.js';

const AIRBYTE = fileURLToPath(new URL('../fixtures/airbyte/source-tidemark-fixture/main.mjs', import.meta.url));
const TAP = fileURLToPath(new URL('./singer/taps/tap-numbers.mjs', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await tempDir()));
afterAll(() => cleanup());

const tableColumns = (path: string, table: string) => sqliteQuery(path, `SELECT name FROM pragma_table_info('${table}') ORDER BY cid`).map((r) => String(r.name));
/** What the fixture connector logs of each configured stream's json_schema: `<stream> <property,…>`. */
const told = (stderr: string) => [...stderr.matchAll(/fixture fields (\S+) (\S*)/g)].map((m) => `${m[1]} ${m[2]}`);
const rowCount = (path: string, table: string) => Number(sqliteQuery(path, `SELECT count(*) AS n FROM ${table}`)[0]!.n);

async function airbyte(name: string, count: number, stream: string) {
  const file = await writeYaml(
    dir,
    `${name}.yaml`,
    `name: ${name}\nsource:\n  type: airbyte\n  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(AIRBYTE)}]\n  config: {count: ${count}, state_every: 10, product_count: 3, api_key: k}\n` +
      `streams:\n${stream}destination: {type: sqlite, path: ${JSON.stringify(join(dir, `${name}.sqlite`))}}\n`,
  );
  return cli(['run', file, '--json'], { env: { TIDEMARK_LOG_LEVEL: 'info' } });
}

describe('columns: and exclude: on connector streams', () => {
  it('an airbyte stream keeps only the listed fields, over checkpoints and an incremental second run', async () => {
    const stream = '  - name: orders\n    columns: [id, amount, updated_at]\n    checkpoint_rows: 7\n';
    const first = await airbyte('ab_pick', 40, stream);
    expect(first.code, first.stderr).toBe(0);
    const db = join(dir, 'ab_pick.sqlite');
    expect(tableColumns(db, 'orders').filter((c) => !c.startsWith('_tidemark'))).toEqual(['id', 'amount', 'updated_at']);
    expect(rowCount(db, 'orders')).toBe(40);
    // The configured catalog names only the picked fields, so a connector honouring field selection fetches no more.
    expect(told(first.stderr)).toEqual(['orders id,amount,updated_at']);
    const second = await airbyte('ab_pick', 65, stream);
    expect(second.code, second.stderr).toBe(0);
    expect(told(second.stderr)).toEqual(['orders id,amount,updated_at']);
    expect(JSON.parse(second.stdout).streams[0].rows_read).toBe(25);
    expect(rowCount(db, 'orders')).toBe(65);
  }, 180_000);

  it('exclude: drops fields of an airbyte stream; an unknown field or the key is refused', async () => {
    const out = await airbyte('ab_drop', 30, '  - name: orders\n    exclude: [tags, note, __faros_data]\n    checkpoint_rows: 7\n');
    expect(out.code, out.stderr).toBe(0);
    const columns = tableColumns(join(dir, 'ab_drop.sqlite'), 'orders');
    const sent = told(out.stderr)[0]!.split(' ')[1]!.split(',');
    expect(sent).toEqual(expect.arrayContaining(['id', 'updated_at', 'huge']));
    for (const dropped of ['tags', 'note', '__faros_data']) expect(sent).not.toContain(dropped);
    expect(columns).toContain('huge');
    expect(columns).not.toContain('tags');
    expect(columns).not.toContain('note');
    const unknown = await airbyte('ab_bad', 10, '  - name: orders\n    columns: [id, updated_at, colour]\n');
    // Known once the connector's catalog is read: the stream fails (exit 1) with a config error, before any row.
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/columns: colour not among the stream's fields \(id, big, /);
    const key = await airbyte('ab_key', 10, '  - name: orders\n    exclude: [id]\n');
    expect(key.code).toBe(1);
    expect(key.stderr).toContain("exclude: id is the stream's key or cursor and must be kept");
  }, 180_000);

  it('a singer stream keeps only the listed fields', async () => {
    const file = await writeYaml(
      dir,
      'tap.yaml',
      `name: tap_pick\nsource:\n  type: singer\n  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}]\n  config: {count: 30, state_every: 10}\n` +
        `streams:\n  - name: numbers\n    primary_key: id\n    columns: [id, big, label]\n    checkpoint_rows: 5\ndestination: {type: sqlite, path: ${JSON.stringify(join(dir, 'tap.sqlite'))}}\n`,
    );
    const out = await cli(['run', file, '--json']);
    expect(out.code, out.stderr).toBe(0);
    expect(tableColumns(join(dir, 'tap.sqlite'), 'numbers').filter((c) => !c.startsWith('_tidemark'))).toEqual(['id', 'big', 'label']);
    expect(rowCount(join(dir, 'tap.sqlite'), 'numbers')).toBe(30);
  }, 180_000);
});
