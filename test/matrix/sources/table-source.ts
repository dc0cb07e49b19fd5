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
/**
 * The ranged variants' stream fields: 6,500 rows in ranges of about 1,500 (at least `parallel` of them) are 5 ranges
 * of ~1,300 rows, each two checkpoints of 1,000 at least; three readers, so ranges are in flight side by side.
 */
export const RANGED = { parallel: 3, range_rows: 1_500 } as const;
/** Ranges the ranged variants' 6,500-row table must be split into, at the least. */
export const RANGED_MIN_RANGES = 4;

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

/** A stream's YAML; a field of `extra` that is undefined is left out (a keyless stream has no `primary_key`). */
export function streamYaml(table: string, write: Write, extra: Record<string, unknown> = {}): string {
  const base: Record<string, unknown> =
    write === 'full'
      ? { table, name: STREAM, primary_key: ['id'], strategy: 'full', batch_rows: BATCH_ROWS, checkpoint_rows: CHECKPOINT_ROWS }
      : { table, name: STREAM, primary_key: ['id'], cursor: 'updated_at', write, batch_rows: BATCH_ROWS, checkpoint_rows: CHECKPOINT_ROWS };
  return yamlList({ ...base, ...extra });
}

export function yamlList(fields: Record<string, unknown>): string {
  return Object.entries(fields)
    .filter(([, v]) => v !== undefined)
    .map(([k, v], i) => `${i === 0 ? '  - ' : '    '}${k}: ${JSON.stringify(v)}`)
    .join('\n');
}

/** How a table source's table differs from the plain fixture table. */
export interface TableOptions {
  /** Rows the table starts with (TABLE_ROWS unless told). */
  readonly rows?: number;
  /** Stream fields added to the YAML (undefined: a field left out). */
  readonly stream?: Record<string, unknown>;
  /**
   * No primary key: the watermark is the cursor alone and each run stops below the newest cursor value, whose rows
   * wait for a run that sees a newer one (docs/pipelines.md, "Cursors and the watermark").
   */
  readonly keyless?: boolean;
  /** Read as ranges: the fewest ranges a full read of the table must be split into (see SourceInstance.ranges). */
  readonly ranges?: number;
}

/** A source instance over a table driver; `wide`: the database holds exact decimals of 20 digits. */
export async function tableInstance(driver: TableDriver, wide: boolean, options: TableOptions = {}): Promise<SourceInstance> {
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
  await write(fixtureRows(1, options.rows ?? TABLE_ROWS, { wideDecimals: wide }));
  const all = () => [...current.values()];
  const newest = () => all().reduce((m, r) => (r.updated_at > m ? r.updated_at : m), '');
  // A keyless incremental stream leaves the newest cursor value's rows for a later run (see TableOptions.keyless).
  const loadable = (w: Write) => (r: FixtureRow) => r.id !== rejected && !(options.keyless && w !== 'full' && r.updated_at === newest());
  const expected = (w: Write): Canonical[] => (w === 'append' ? versions : all()).filter(loadable(w)).map(toCanonical);
  return {
    yaml: (w) => `source:\n${driver.sourceYaml}\nstreams:\n${streamYaml(driver.table, w, options.stream)}`,
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
    forgetUnread(held) {
      const have = new Set(held.map((r) => JSON.stringify(r)));
      const newer = new Map<bigint, FixtureRow>();
      for (const v of versions) newer.set(v.id, v);
      // Only a version something newer replaced can be gone; the newest version of every row is still to be read.
      const gone = versions.filter((v) => newer.get(v.id) !== v && !have.has(JSON.stringify(toCanonical(v))));
      versions.splice(0, versions.length, ...versions.filter((v) => !gone.includes(v)));
    },
    watermark: (w) => (w === 'full' ? 'none' : options.keyless ? 'cursor' : 'tuple'),
    // More than one range of the fixture's table: each must hold more than a checkpoint, or no chunk boundary is crossed.
    ...(options.ranges !== undefined ? { ranges: { min: options.ranges, ...(options.ranges > 1 ? { rowsOver: CHECKPOINT_ROWS } : {}) } } : {}),
    ...(driver.env ? { env: driver.env } : {}),
    cleanup: () => driver.close(),
  };
}
