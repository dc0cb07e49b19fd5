/**
 * Model-based property test: random sequences of source operations (inserts sharing timestamps, updates to a
 * newer, equal or older timestamp) interleaved with runs, some of them failing at random failpoints. After a final
 * quiet run the destination must equal the model. Seeded and shrinking; `TIDEMARK_PROPERTY_RUNS` raises the count
 * (CI runs 200 sequences in all) and `TIDEMARK_PROPERTY_SEED` replays one.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { resetFailpoints } from '../../src/core/failpoints.js';
import { parsePipeline, run } from '../../src/index.js';
import { tempDir } from '../helpers/fs.js';
import { checkOracle, type Canonical } from '../helpers/oracle.js';

const TOTAL = Number(process.env.TIDEMARK_PROPERTY_RUNS ?? 200);
const SEED = process.env.TIDEMARK_PROPERTY_SEED !== undefined ? Number(process.env.TIDEMARK_PROPERTY_SEED) : undefined;
const POINTS = ['extract.after_batch', 'load.after_write', 'load.before_commit', 'load.after_commit'] as const;

type Op =
  | { readonly t: 'insert'; readonly n: number; readonly dt: number }
  | { readonly t: 'update'; readonly pick: number; readonly dt: number }
  | { readonly t: 'run'; readonly fail?: { readonly point: (typeof POINTS)[number]; readonly at: number } };

interface Mode {
  readonly name: string;
  readonly kind: 'duckdb' | 'sqlite';
  readonly write: 'merge' | 'append';
  readonly lookback?: string;
  /** How far back (seconds) an update may move a row's timestamp. */
  readonly back: number;
  readonly updates: boolean;
  readonly share: number;
  /** The table has no primary key: inserts may share the second of the last run, and the newest second waits. */
  readonly keyless?: boolean;
}

const MODES: readonly Mode[] = [
  { name: 'merge with lookback, updates to older timestamps', kind: 'sqlite', write: 'merge', lookback: '2h', back: 3600, updates: true, share: 0.4 },
  { name: 'merge, updates to equal or newer timestamps', kind: 'sqlite', write: 'merge', back: 0, updates: true, share: 0.4 },
  { name: 'append, inserts sharing timestamps', kind: 'duckdb', write: 'append', back: 0, updates: false, share: 0.15 },
  { name: 'append without a primary key, inserts joining the last run\'s newest second', kind: 'sqlite', write: 'append', back: 0, updates: false, share: 0.05, keyless: true },
];

function opArb(mode: Mode): fc.Arbitrary<Op> {
  const ops: fc.Arbitrary<Op>[] = [
    fc.record({ t: fc.constant('insert' as const), n: fc.integer({ min: 1, max: 6 }), dt: fc.integer({ min: 0, max: 1 }) }),
    fc.record({
      t: fc.constant('run' as const),
      fail: fc.option(fc.record({ point: fc.constantFrom(...POINTS), at: fc.integer({ min: 1, max: 4 }) }), { nil: undefined, freq: 2 }),
    }) as fc.Arbitrary<Op>,
  ];
  if (mode.updates) ops.push(fc.record({ t: fc.constant('update' as const), pick: fc.nat(), dt: fc.integer({ min: -mode.back, max: 1 }) }));
  return fc.oneof(...ops);
}

const stamp = (second: number) => new Date(Date.UTC(2024, 0, 1) + second * 1000).toISOString().replace('T', ' ').replace('Z', '000');

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-model-')));
afterAll(async () => {
  resetFailpoints('');
  await cleanup();
});

describe.each(MODES)('model: $name', (mode) => {
  it('after a final quiet run the destination equals the model', async () => {
    let caseNo = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb(mode), { minLength: 1, maxLength: 14 }), async (ops) => {
        const dir = join(root, `${MODES.indexOf(mode)}-${caseNo++}`);
        await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
        const sourcePath = join(dir, 'source.sqlite');
        const db = new Database(sourcePath);
        db.pragma('journal_mode = WAL');
        db.exec(`CREATE TABLE items (id INTEGER${mode.keyless ? '' : ' PRIMARY KEY'}, updated_at TIMESTAMP NOT NULL, value TEXT NOT NULL)`);
        const model = new Map<number, { ts: number; value: string }>();
        let clock = 0;
        let nextId = 1;
        let version = 0;
        const pipeline = parsePipeline(
          `name: model
source: {type: sqlite, path: source.sqlite}
streams:
  - table: items
${mode.keyless ? '' : '    primary_key: [id]\n'}    cursor: updated_at
    write: ${mode.write}
    checkpoint_rows: 3
    batch_rows: 2
${mode.lookback ? `    lookback: ${mode.lookback}\n` : ''}destination: {type: ${mode.kind}, path: w.${mode.kind}}
`,
          { baseDir: dir },
        );
        const upsert = db.prepare(
          mode.keyless ? 'INSERT INTO items VALUES (?, ?, ?)' : 'INSERT INTO items VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, value = excluded.value',
        );
        try {
          // Without a key the newest second waits for a newer one: a last row one second later releases it.
          const quiet: Op[] = mode.keyless ? [{ t: 'insert', n: 1, dt: 1 }, { t: 'run' }] : [{ t: 'run' }];
          for (const op of [...ops, ...quiet]) {
            if (op.t === 'insert') {
              clock += op.dt;
              for (let i = 0; i < op.n; i += 1) {
                const id = nextId++;
                const value = `v${++version}`;
                upsert.run(id, stamp(clock), value);
                model.set(id, { ts: clock, value });
              }
            } else if (op.t === 'update' && model.size > 0) {
              const ids = [...model.keys()];
              const id = ids[op.pick % ids.length]!;
              // Forward or equal moves happen after time advanced past the last run; backward ones stay within lookback.
              clock += 1;
              const ts = Math.max(0, clock + op.dt);
              const value = `v${++version}`;
              upsert.run(id, stamp(ts), value);
              model.set(id, { ts, value });
            } else if (op.t === 'run') {
              resetFailpoints(op.fail ? `${op.fail.point}=${op.fail.at}:throw` : '');
              await run(pipeline);
              resetFailpoints('');
              if (!mode.keyless) clock += 1;
            }
          }
        } finally {
          db.close();
          resetFailpoints('');
        }
        if (mode.keyless) model.delete(nextId - 1);
        const expected: Canonical[] = [...model].map(([id, r]) => ({ id: String(id), updated_at: stamp(r.ts).slice(0, 19), value: r.value }));
        await checkOracle({
          kind: mode.kind,
          path: join(dir, `w.${mode.kind}`),
          table: 'items',
          key: 'id',
          columns: ['id', 'updated_at', 'value'],
          expected: mode.kind === 'duckdb' ? expected : expected.map((r) => ({ ...r, updated_at: `${r.updated_at}.000000` })),
          pipeline: 'model',
        });
      }),
      { numRuns: Math.max(1, Math.round(TOTAL * mode.share)), ...(SEED !== undefined ? { seed: SEED } : {}), endOnFailure: true },
    );
  }, 600_000);
});
