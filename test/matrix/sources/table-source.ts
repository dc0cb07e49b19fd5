/**
 * What the three database sources share: one `items` table holding the fixture, the stream YAML per write, and
 * the bookkeeping of which row versions the destination must hold. Each database only says how to write rows.
 */
import { changedRows, fixtureRow, fixtureRows, nextGroup, STREAM, toCanonical, type Canonical, type FixtureRow } from '../fixture.js';
import type { BadOutcome, SourceInstance, Write } from '../types.js';

/** Enough rows for 5 checkpoints of 1,000 and 3 DuckDB chunks of 2,048 (the Postgres → DuckDB bulk path). */
export const TABLE_ROWS = 6_500;
export const CHECKPOINT_ROWS = 1_000;
export const BATCH_ROWS = 250;
/** The row the deep bad value goes into: past the first checkpoint and the first chunk. */
export const BAD_ID = 4_321;

export interface TableDriver {
  /** `source:` YAML lines (indented by two spaces under `source:`). */
  readonly sourceYaml: string;
  /** The table as the stream names it (`items`, `public.items`). */
  readonly table: string;
  upsert(rows: readonly FixtureRow[]): Promise<void>;
  /** Writes a value the column cannot hold into row `id` (undefined: this database enforces its types). */
  breakRow?(id: bigint): Promise<BadOutcome>;
  close(): Promise<void>;
  readonly env?: Record<string, string>;
}

export function streamYaml(table: string, write: Write, extra: Record<string, unknown> = {}): string {
  const base: Record<string, unknown> =
    write === 'full'
      ? { table, name: STREAM, primary_key: ['id'], strategy: 'full', batch_rows: BATCH_ROWS, checkpoint_rows: CHECKPOINT_ROWS }
      : { table, name: STREAM, primary_key: ['id'], cursor: 'updated_at', write, batch_rows: BATCH_ROWS, checkpoint_rows: CHECKPOINT_ROWS };
  return yamlList({ ...base, ...extra });
}

export function yamlList(fields: Record<string, unknown>): string {
  return Object.entries(fields)
    .map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`)
    .join('\n');
}

/** A source instance over a table driver; `wide`: the database holds exact decimals of 20 digits. */
export async function tableInstance(driver: TableDriver, wide: boolean): Promise<SourceInstance> {
  const current = new Map<bigint, FixtureRow>();
  /** Every version a run read (append keeps them all). */
  const versions: FixtureRow[] = [];
  let rejected: bigint | undefined;
  const write = async (rows: readonly FixtureRow[]) => {
    await driver.upsert(rows);
    for (const r of rows) {
      current.set(r.id, r);
      versions.push(r);
    }
  };
  await write(fixtureRows(1, TABLE_ROWS, { wideDecimals: wide }));
  const all = () => [...current.values()];
  const expected = (w: Write): Canonical[] => (w === 'append' ? versions : all()).filter((r) => r.id !== rejected).map(toCanonical);
  return {
    yaml: (w) => `source:\n${driver.sourceYaml}\nstreams:\n${streamYaml(driver.table, w)}`,
    expected,
    async change() {
      const { updates, inserts } = changedRows(all(), wide);
      await write([...updates, ...inserts]);
    },
    async breakDeep() {
      if (!driver.breakRow) throw new Error('this database enforces its column types');
      rejected = BigInt(BAD_ID);
      return driver.breakRow(rejected);
    },
    expectedAfterBad: (w) => expected(w),
    async repair() {
      // The repaired row gets a newer cursor, as an application fixing it would: an incremental read then sees it.
      const id = rejected!;
      rejected = undefined;
      const versionsBefore = versions.filter((v) => v.id === id);
      versions.splice(0, versions.length, ...versions.filter((v) => !versionsBefore.includes(v)));
      await write([fixtureRow(Number(id), nextGroup(all()), 'fixed', wide)]);
    },
    async grow() {
      const maxId = all().reduce((m, r) => (r.id > m ? r.id : m), 0n);
      await write(fixtureRows(Number(maxId) + 1, 2 * CHECKPOINT_ROWS + 7, { group: nextGroup(all()), wideDecimals: wide, label: 'g' }));
    },
    watermark: (w) => (w === 'full' ? 'none' : 'tuple'),
    ...(driver.env ? { env: driver.env } : {}),
    cleanup: () => driver.close(),
  };
}
