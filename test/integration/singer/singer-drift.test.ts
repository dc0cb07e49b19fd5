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
    expect(result.streams[0]).toMatchObject({ outcome: 'committed', rows_read: 3000, rows_loaded: 2988, rows_rejected: 12 });
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
