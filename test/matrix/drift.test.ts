/**
 * The conformance matrix's schema-drift dimension: every source that can change shape × destination × write ×
 * change (a new column, a dropped one, each widening, a narrowing, a case-only rename, a mid-stream SCHEMA message)
 * × when it lands (between runs, inside a run, or with the widening run killed right after its ALTER), through the
 * real CLI, 5,100 rows across the change. The oracle compares every value of every column with the model exactly;
 * a refused cell asserts the refusal and its message, and that nothing of the refused rows landed.
 *
 * `npm test` runs a seeded sample covering every source, destination, write, change and when at least once
 * (`TIDEMARK_DRIFT_CELLS=n` sizes it, default 11); `TIDEMARK_MATRIX=all` runs every cell; `TIDEMARK_MATRIX_SEED`,
 * `TIDEMARK_MATRIX_ONLY=<regex>`, `TIDEMARK_MATRIX_SOURCE=<source>` (that source's cells only), `TIDEMARK_MATRIX_CONCURRENCY=k` and `TIDEMARK_MATRIX_LOG=<file>` as in the
 * main matrix.
 */
import { appendFile, mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { tempDir } from '../helpers/fs.js';
import { endPg } from './pg.js';
import { driftCellId, driftCells, expectedRefusal, sampleCells, shuffled, type DriftCell } from './drift/cells.js';
import { DRIFT_DESTINATIONS, driftDestination } from './drift/destinations.js';
import { runDriftCell } from './drift/run-cell.js';
import { DRIFT_SOURCES } from './drift/sources.js';
import { cellSlots } from './slots.js';

const ALL = process.env.TIDEMARK_MATRIX === 'all';
const SEED = Number(process.env.TIDEMARK_MATRIX_SEED ?? '2');
const SIZE = Number(process.env.TIDEMARK_DRIFT_CELLS ?? 11);
const ONLY = process.env.TIDEMARK_MATRIX_ONLY;
/** One source's cells (`http`, `postgres`, …): with TIDEMARK_MATRIX=all, every cell of that source. */
const SOURCE = process.env.TIDEMARK_MATRIX_SOURCE;
const CONCURRENCY = Number(process.env.TIDEMARK_MATRIX_CONCURRENCY ?? 2);
const LOG = process.env.TIDEMARK_MATRIX_LOG;

const sources = new Map(DRIFT_SOURCES.map((s) => [s.name, s]));
const destinations = new Map(DRIFT_DESTINATIONS.map((d) => [d.name, d]));
const cells = driftCells(SOURCE === undefined ? DRIFT_SOURCES : DRIFT_SOURCES.filter((s) => s.name === SOURCE), [...destinations.keys()]);
if (cells.length === 0) throw new Error(`TIDEMARK_MATRIX_SOURCE=${SOURCE}: no such drift source (${DRIFT_SOURCES.map((s) => s.name).join(', ')})`);
// Every cell in a seeded order, so a long run stopped part way has covered every source and destination alike.
const chosen: DriftCell[] = ONLY ? cells.filter((c) => new RegExp(ONLY).test(driftCellId(c))) : ALL ? shuffled(cells, SEED) : sampleCells(cells, SIZE, SEED);

const slot = cellSlots(CONCURRENCY);

const tally = { passed: 0, refused: 0, failed: 0, notFired: 0 };
let root: string;
let cleanup: () => Promise<void>;
let started = 0;
let n = 0;
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir('tidemark-drift-'));
  started = Date.now();
});
afterAll(async () => {
  const line = `drift matrix (seed ${SEED}, ${SOURCE ? `source ${SOURCE}, ` : ''}${ONLY ? `only ${ONLY}` : ALL ? 'all cells' : `sample of ${chosen.length}`} of ${cells.length}): ${tally.passed} passed, ${tally.refused} refused as expected, ${tally.failed} failed, kill not reached in ${tally.notFired}; ${((Date.now() - started) / 1000).toFixed(0)}s`;
  console.log(line);
  if (LOG) await appendFile(LOG, `${line}\n`);
  await endPg();
  if (tally.failed === 0) await cleanup();
});

describe(`drift matrix (TIDEMARK_MATRIX_SEED=${SEED})`, { concurrent: CONCURRENCY > 1 }, () => {
  for (const cell of chosen) {
    const id = driftCellId(cell);
    const test = CONCURRENCY > 1 ? it.concurrent : it;
    test(`${id} (seed ${SEED})`, () =>
      slot(async () => {
        n += 1;
        const uid = `d${process.pid}_${n}_${Math.random().toString(36).slice(2, 6)}`;
        const dir = join(root, uid);
        await mkdir(dir, { recursive: true });
        const t0 = Date.now();
        const source = sources.get(cell.source)!;
        let status = 'failed';
        let reason = '';
        let notFired = false;
        try {
          const destination = await driftDestination(destinations.get(cell.destination)!, { dir, uid });
          const outcome = await runDriftCell(cell, source, destination, { dir, uid }, expectedRefusal(source, cell));
          status = outcome.status;
          tally[outcome.status] += 1;
          if (outcome.notFired) tally.notFired += 1;
          notFired = outcome.notFired === true;
          await rm(dir, { recursive: true, force: true });
        } catch (e) {
          tally.failed += 1;
          reason = e instanceof Error ? e.message : String(e);
          throw new Error(`${id} failed (reproduce: TIDEMARK_MATRIX_ONLY=${JSON.stringify(id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))}): ${reason} (files kept in ${dir})`);
        } finally {
          if (LOG) await appendFile(LOG, `${new Date().toISOString()} ${status} ${((Date.now() - t0) / 1000).toFixed(1)}s ${id}${notFired ? ' (kill not reached)' : ''}${reason ? ` :: ${reason.slice(0, 400)}` : ''}\n`);
        }
      }),
      CONCURRENCY > 1 ? 3_600_000 : 300_000,
    );
  }
});
