/**
 * Airbyte source: airbyte-matrix.mjs, a `>=` connector (it re-sends the records at its state's cursor) with a STREAM
 * state every 500 records, reading the fixture from a JSONL file that the adapter rewrites on every change, as the
 * Singer adapter does.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { changedRows, fixtureRows, nextGroup, STREAM, toCanonical, type FixtureRow } from '../fixture.js';
import type { CellSpec, SourceAdapter, SourceInstance, Verdict } from '../types.js';
import { yamlList } from './table-source.js';

const CONNECTOR = fileURLToPath(new URL('./airbyte-matrix.mjs', import.meta.url));
const ROWS = 2_600;
const STATE_EVERY = 500;
const BAD_AT = 1_700;

const line = (r: FixtureRow) =>
  `{"id":${r.id},"updated_at":"${r.updated_at.replace(' ', 'T')}Z","big":${r.big},"amount":${JSON.stringify(r.amount)},"note":${JSON.stringify(r.note)}}`;
const order = (rows: FixtureRow[]) => rows.sort((a, b) => (a.updated_at === b.updated_at ? Number(a.id - b.id) : a.updated_at < b.updated_at ? -1 : 1));

export const airbyteSource: SourceAdapter = {
  name: 'airbyte-ge',
  validate(c: CellSpec): Verdict {
    return undefined;
  },
  async setup(ctx): Promise<SourceInstance> {
    const data = join(ctx.dir, 'connector-rows.jsonl');
    const current = new Map<bigint, FixtureRow>();
    const versions: FixtureRow[] = [];
    let bad: bigint | undefined;
    const all = () => order([...current.values()]);
    const flush = () => writeFile(data, all().map((r) => (r.id === bad ? `{"id":${r.id},"updated_at":` : line(r))).join('\n') + '\n');
    const write = async (rows: readonly FixtureRow[]) => {
      for (const r of rows) {
        current.set(r.id, r);
        versions.push(r);
      }
      await flush();
    };
    await write(fixtureRows(1, ROWS, { wideDecimals: true }));
    const expected = (w: string) => (w === 'append' ? versions : all()).filter((r) => r.id !== bad).map(toCanonical);
    return {
      yaml: (w) =>
        [
          'source:',
          '  type: airbyte',
          `  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(CONNECTOR)}]`,
          `  config: {data: ${JSON.stringify(data)}, state_every: ${STATE_EVERY}}`,
          'streams:',
          yamlList({ name: STREAM, primary_key: 'id', ...(w === 'full' ? { strategy: 'full' } : { write: w }), checkpoint_rows: STATE_EVERY }),
        ].join('\n'),
      expected,
      async change() {
        const { updates, inserts } = changedRows(all(), true);
        await write([...updates, ...inserts]);
      },
      async breakDeep() {
        bad = all()[BAD_AT]!.id;
        await flush();
        return { kind: 'fail', message: /JSON Airbyte message/ };
      },
      // The records before the connector's last state ahead of the broken line committed with it; a full run's build
      // publishes nothing until it ends (the destination keeps the previous generation: none).
      expectedAfterBad: (w) => (w === 'full' ? [] : all().slice(0, Math.floor(BAD_AT / STATE_EVERY) * STATE_EVERY).map(toCanonical)),
      async repair() {
        bad = undefined;
        await flush();
      },
      async grow() {
        const maxId = all().reduce((m, r) => (r.id > m ? r.id : m), 0n);
        await write(fixtureRows(Number(maxId) + 1, 2 * STATE_EVERY + 13, { group: nextGroup(all()), wideDecimals: true, label: 'g' }));
      },
      // The connector's state is its own; the engine's watermark over (updated_at, id) is checked where it keeps one.
      watermark: () => 'none',
      cleanup: async () => undefined,
    };
  },
};
