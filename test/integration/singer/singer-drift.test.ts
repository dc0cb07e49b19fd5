/**
 * A Singer tap whose output changes mid-stream: bytes that are not UTF-8 inside a record, and a SCHEMA message that
 * adds a column after thousands of records. Each case spans many STATE checkpoints.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadPipeline, run } from '../../../src/index.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { destinationQuery } from '../../helpers/warehouse.js';

const TAP = fileURLToPath(new URL('./taps/tap-drift.mjs', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir('tidemark-singer-drift-')));
afterEach(() => cleanup());

async function pipeline(kind: 'duckdb' | 'sqlite', tapConfig: Record<string, number>): Promise<string> {
  return writeYaml(
    dir,
    'p.yaml',
    `name: drift
source:
  type: singer
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}]
  config: ${JSON.stringify(tapConfig)}
streams:
  - name: events
    primary_key: id
    # The tap's bookmark is the id: its STATEs are then shown safe, and a re-read starts at the last one committed.
    cursor: id
    checkpoint_rows: 100
destination:
  type: ${kind}
  path: ${JSON.stringify(join(dir, `w.${kind}`))}
`,
  );
}

describe.each(['duckdb', 'sqlite'] as const)('Singer output into %s', (kind) => {
  it('a record whose text is not UTF-8 is rejected naming its column and byte, never stored as U+FFFD; the others load', async () => {
    const file = await pipeline(kind, { count: 3000, state_every: 100, bad_every: 250 });
    const result = await run(await loadPipeline(file));
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsRead: 3000, rowsLoaded: 2988, rowsRejected: 12 });
    const target = join(dir, `w.${kind}`);
    const replaced = await destinationQuery(kind, target, `SELECT count(*) AS n FROM events WHERE name LIKE '%\uFFFD%'`);
    expect(Number(replaced[0]!.n)).toBe(0);
    expect(Number((await destinationQuery(kind, target, `SELECT count(*) AS n FROM events WHERE name LIKE '%café'`))[0]!.n)).toBe(2988);
    const rejects = await destinationQuery(kind, target, `SELECT column_name, reason, "row" AS r FROM _tidemark_rejects ORDER BY reason`);
    expect(rejects).toHaveLength(12);
    for (const reject of rejects) {
      expect(reject.column_name).toBe('name');
      expect(reject.reason).toMatch(/^column name: text is not valid UTF-8: byte 0xE9 at character 4 of text "caf.*"$/);
      // The reject keeps the byte: U+DCE9 is 0xE9 escaped, so the record can be repaired from it.
      expect(JSON.parse(String(reject.r)).name).toBe('caf\udce9');
    }
  }, 60_000);
});

describe.each(['duckdb', 'sqlite'] as const)('a mid-stream SCHEMA message adding a column, into %s', (kind) => {
  it('the 3,000 records after it land with the new column in the same run, across checkpoints; a later run keeps them', async () => {
    const file = await pipeline(kind, { count: 5000, state_every: 100, add_at: 2001 });
    const result = await run(await loadPipeline(file));
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 5000, rowsRejected: 0 });
    const target = join(dir, `w.${kind}`);
    const counts = async () =>
      (await destinationQuery(kind, target, `SELECT count(*) AS n, count(DISTINCT id) AS d, count(extra) AS e, sum(CASE WHEN extra = id * 10 THEN 1 ELSE 0 END) AS right FROM events`))[0]!;
    expect(Object.values(await counts()).map(Number)).toEqual([5000, 5000, 3000, 3000]);
    const again = await run(await loadPipeline(await pipeline(kind, { count: 5200, state_every: 100, add_at: 2001 })));
    expect(again.streams[0]).toMatchObject({ outcome: 'committed', rowsLoaded: 200 });
    expect(Object.values(await counts()).map(Number)).toEqual([5200, 5200, 3200, 3200]);
  }, 60_000);
});
