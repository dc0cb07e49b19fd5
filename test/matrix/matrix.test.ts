/**
 * The conformance matrix: every source × destination × write × fault through the real CLI and one oracle.
 * `npm test` runs a seeded sample within a cost budget, picking the cells that add the most not-yet-covered
 * sources, destinations, writes, faults and source→destination pairs (another seed, other cells);
 * `TIDEMARK_MATRIX_SEED=n` replays a sample, `TIDEMARK_MATRIX=all` runs every cell, `TIDEMARK_MATRIX_CELLS=n` sets
 * the sample's budget (a plain cell costs 1, a bucket or an extra run more), `TIDEMARK_MATRIX_ONLY=<regex>` runs the cells whose name matches, `TIDEMARK_MATRIX_SHARD=i/n` runs every
 * n-th of them, `TIDEMARK_MATRIX_CONCURRENCY=k` runs k cells at once (each cell is its own processes and files) and
 * `TIDEMARK_MATRIX_LOG=<file>` appends one line per finished cell (vitest prints only at the end; with
 * `TIDEMARK_MATRIX_RESUME=1` the cells it records as passed or refused are not run again, so a long run resumes).
 */
import { existsSync, readFileSync } from 'node:fs';
import { appendFile, mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { tempDir } from '../helpers/fs.js';
import { coverageTable, type CoverageEntry } from './coverage.js';
import { startS3, type LocalS3 } from '../helpers/s3.js';
import { lakeDirDestination, lakeS3Destination } from './destinations/lake.js';
import { duckdbDestination, sqliteDestination } from './destinations/embedded.js';
import { postgresDestination } from './destinations/postgres.js';
import { endPg } from './pg.js';
import { Profile, runCell } from './harness.js';
import { knownBug } from './known-bugs.js';
import { bucketFilesSources, filesSources } from './sources/files.js';
import { httpSources } from './sources/http.js';
import { mysqlRangedSource, mysqlSource } from './sources/mysql.js';
import { postgresRangedSources, postgresSource } from './sources/postgres.js';
import { singerSource } from './sources/singer.js';
import { airbyteSource } from './sources/airbyte.js';
import { sqliteRangedSource, sqliteSource } from './sources/sqlite.js';
import { codeSources } from './sources/code.js';
import { cellId, FAILPOINTS, RANGE_FAILPOINTS, rangedOnly, WRITES, type CellSpec, type Failpoint, type DestinationAdapter, type Fault, type SourceAdapter, type Verdict } from './types.js';
import { cellSlots } from './slots.js';

/** One local S3 server for the whole matrix, started by the first cell that needs it. */
let s3: Promise<LocalS3> | undefined;
const sharedS3 = () => (s3 ??= startS3('tidemark-matrix'));

const SOURCES: readonly SourceAdapter[] = [postgresSource, mysqlSource, sqliteSource, ...postgresRangedSources, mysqlRangedSource, sqliteRangedSource, ...filesSources, ...bucketFilesSources(sharedS3), ...httpSources, singerSource, airbyteSource, ...codeSources];
const DESTINATIONS: readonly DestinationAdapter[] = [duckdbDestination, sqliteDestination, postgresDestination, lakeDirDestination, lakeS3Destination(sharedS3)];
const FAULTS: readonly Fault[] = [
  { kind: 'none' },
  { kind: 'rerun' },
  { kind: 'bad' },
  { kind: 'change' },
  { kind: 'full-then-run' },
  ...[...FAILPOINTS, ...RANGE_FAILPOINTS].map((point) => ({ kind: 'kill' as const, point })),
  { kind: 'kill-change' },
];

const ALL = process.env.TIDEMARK_MATRIX === 'all';
// A fixed default, so that `npm test` runs the same sample on every machine; `random` explores.
const SEED_TEXT = process.env.TIDEMARK_MATRIX_SEED ?? '2';
const SEED = SEED_TEXT === 'random' ? Math.floor(Math.random() * 1_000_000) : Number(SEED_TEXT);
/** Cost units of the CI sample: about 3 minutes on the quiet 2-core CI machine, two cells at a time. */
const SAMPLE_BUDGET = Number(process.env.TIDEMARK_MATRIX_CELLS ?? 20);
const ONLY = process.env.TIDEMARK_MATRIX_ONLY;
const SHARD = /^(\d+)\/(\d+)$/.exec(process.env.TIDEMARK_MATRIX_SHARD ?? '');
const CONCURRENCY = Number(process.env.TIDEMARK_MATRIX_CONCURRENCY ?? 2);
const LOG = process.env.TIDEMARK_MATRIX_LOG;
/** With a LOG: the cells it records as passed or refused are counted from it, not run again (a long run resumed). */
const RESUME = process.env.TIDEMARK_MATRIX_RESUME === '1';

const slot = cellSlots(CONCURRENCY);
const sources = new Map(SOURCES.map((s) => [s.name, s]));
const destinations = new Map(DESTINATIONS.map((d) => [d.name, d]));

/** Rules of the matrix itself, before any adapter's. */
function matrixRule(c: CellSpec): Verdict {
  if (c.fault.kind === 'full-then-run' && c.write === 'full') return { skip: 'full-then-run: a full stream is a full run every time' };
  if (rangedOnly(c.fault) && !sources.get(c.source)?.ranged) return { skip: 'range failpoints and kill-change: only a table read as ranges (the -ranged sources) has ranges' };
  return undefined;
}

/** The whole cross product, each cell valid, refused by design, or skipped with the reason. */
function buildCells(): CoverageEntry[] {
  const out: CoverageEntry[] = [];
  for (const source of SOURCES)
    for (const destination of DESTINATIONS)
      for (const write of WRITES)
        for (const fault of FAULTS) {
          const cell: CellSpec = { source: source.name, destination: destination.name, write, fault };
          const verdict = matrixRule(cell) ?? source.validate(cell) ?? destination.validate(cell);
          if (verdict && 'skip' in verdict) out.push({ cell, status: 'skipped', reason: verdict.skip });
          else if (verdict && fault.kind !== 'none') out.push({ cell, status: 'skipped', reason: `refused by design, asserted once with fault none: ${verdict.why}` });
          else out.push({ cell, status: 'not-sampled' });
        }
  return out;
}

/** mulberry32: a small seeded generator, so a sample can be replayed from its seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Relative wall time of a cell (a bucket on s3rver is the slow part; kills and re-runs add runs). */
function cost(c: CellSpec): number {
  const s3 = (c.source.endsWith('-s3') ? 2 : 0) + (c.destination === 'lake-s3' ? 2 : 0);
  const runs = c.fault.kind === 'none' ? 0 : c.fault.kind === 'kill' || c.fault.kind === 'rerun' || c.fault.kind === 'full-then-run' || c.fault.kind === 'kill-change' ? 1 : 0.5;
  // A ranged cell runs its readers and writers side by side and asks the ledger and state after each kill and at the end.
  const ranged = sources.get(c.source)?.ranged ? 1.5 : 1;
  // A known-bug cell only shows the bug is still there: worth less of the CI budget than a cell that can regress.
  return (1 + s3 + runs) * ranged * (knownBug(c) ? 2 : 1);
}

/** Greedy by seed: each pick adds the most not-yet-covered features (source, destination, write, fault, pair) per cost, within the budget. */
function sample(entries: readonly CoverageEntry[], budget: number, seed: number): Set<CoverageEntry> {
  const rnd = random(seed);
  const pool = entries.filter((e) => e.status === 'not-sampled').map((e) => ({ e, r: rnd() })).sort((a, b) => a.r - b.r).map((x) => x.e);
  const covered = new Set<string>();
  // Faults first (each is a different path through the engine), then destinations and writes, then sources.
  const features = (c: CellSpec): [string, number][] => [
    [`f:${c.fault.kind === 'kill' ? c.fault.point : c.fault.kind}`, 4],
    [`d:${c.destination}`, 2],
    [`w:${c.write}`, 2],
    // Each kind of source (http and files as one each, their variants below), so a new variant never crowds one out.
    // The ranged variants (every key shape) as one kind: one ranged cell at least, its failpoints are faults of their own.
    [`s:${c.source.replace(/^http-.*/, 'http').replace(/-(dir|s3)$/, '').replace(/^\w+-ranged.*/, 'ranged')}`, 1.5],
    [`s:${c.source}`, 0.5],
    [`p:${c.source}>${c.destination}`, 0.25],
    // One bucket cell per sample at least: object storage is its own code path, slow on s3rver.
    [`x:${c.source.endsWith('-s3') || c.destination === 'lake-s3' ? 's3' : 'local'}`, 6],
    // One ranged cell killed in or between ranges per sample at least: ranges (readers side by side, a commit per
    // range, a resume by the ledger) are their own load path.
    [`r:${rangedOnly(c.fault) ? 'ranged' : 'whole'}`, 6],
  ];
  const picked = new Set<CoverageEntry>();
  let spent = 0;
  for (;;) {
    let best: CoverageEntry | undefined;
    let score = -1;
    for (const e of pool) {
      if (picked.has(e) || spent + cost(e.cell) > budget) continue;
      const s = features(e.cell).reduce((t, [f, w]) => t + (covered.has(f) ? 0 : w), 0) / cost(e.cell);
      if (s > score) [best, score] = [e, s];
    }
    if (!best) return picked;
    picked.add(best);
    spent += cost(best.cell);
    for (const [f] of features(best.cell)) covered.add(f);
  }
}

/** Cells a LOG records as done: `<time> <status> <secs>s <cell id> [<profile>] (not fired: <point>)…`. */
function loggedDone(log: string): Map<string, Pick<CoverageEntry, 'status' | 'notFired'>> {
  const done = new Map<string, Pick<CoverageEntry, 'status' | 'notFired'>>();
  for (const line of readFileSync(log, 'utf8').split('\n')) {
    const m = /^\S+ (passed|refused) \S+s (.+?) \[[^\]]*\](?: \(not fired: ([\w.]+)\))?/.exec(line);
    if (m) done.set(m[2]!, { status: m[1] as 'passed' | 'refused', ...(m[3] ? { notFired: m[3] as Failpoint } : {}) });
  }
  return done;
}

const inOrder = (picked: ReadonlySet<CoverageEntry>) => entries.filter((e) => picked.has(e));

/** Every cell in a seeded order: a long run stopped part way has covered every source and destination alike. */
function shuffled(open: readonly CoverageEntry[], seed: number): CoverageEntry[] {
  const rnd = random(seed);
  return open.map((e) => ({ e, r: rnd() })).sort((a, b) => a.r - b.r).map((x) => x.e);
}

const entries = buildCells();
if (RESUME && LOG && existsSync(LOG)) {
  const done = loggedDone(LOG);
  for (const e of entries) Object.assign(e, e.status === 'not-sampled' ? done.get(cellId(e.cell)) : undefined);
}
function choose(): Set<CoverageEntry> {
  const open = entries.filter((e) => e.status === 'not-sampled');
  const picked = ONLY ? open.filter((e) => new RegExp(ONLY).test(cellId(e.cell))) : ALL ? shuffled(open, SEED) : inOrder(sample(entries, SAMPLE_BUDGET, SEED));
  return new Set(SHARD ? picked.filter((_, i) => i % Number(SHARD[2]) === Number(SHARD[1]) - 1) : picked);
}
const chosen = choose();

let root: string;
let cleanup: () => Promise<void>;
let started = 0;
let n = 0;
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir('tidemark-matrix-'));
  started = Date.now();
});
afterAll(async () => {
  const table = coverageTable(entries, SEED, ONLY ? `only ${ONLY}` : ALL ? 'all cells' : `sample of ${chosen.size}`, Date.now() - started);
  console.log(table);
  if (LOG) await appendFile(LOG, `${table}\n`);
  if (s3) await (await s3).stop();
  await endPg();
  // Passed cells removed their files; a failed cell's stay for a look (named in its log line and error).
  if (!entries.some((e) => e.status === 'failed')) await cleanup();
});

describe(`conformance matrix (TIDEMARK_MATRIX_SEED=${SEED})`, { concurrent: CONCURRENCY > 1 }, () => {
  for (const entry of chosen) {
    const bug = knownBug(entry.cell);
    const name = `${cellId(entry.cell)}${bug ? ` [KNOWN BUG 16.${bug.item}]` : ''} (seed ${SEED})`;
    const body = () => slot(async () => {
      n += 1;
      const uid = `m${process.pid}_${n}_${Math.random().toString(36).slice(2, 6)}`;
      const dir = join(root, uid);
      await mkdir(dir, { recursive: true });
      const t0 = Date.now();
      const profile = new Profile();
      try {
        const outcome = await runCell(entry.cell, sources.get(entry.cell.source)!, destinations.get(entry.cell.destination)!, { dir, uid }, profile);
        entry.status = outcome.status;
        if (outcome.notFired) entry.notFired = outcome.notFired;
        // A passed cell's files are of no further use; a whole run's would fill the disk (a failed one's are kept).
        await rm(dir, { recursive: true, force: true });
      } catch (e) {
        entry.status = bug ? 'known-bug' : 'failed';
        entry.reason = e instanceof Error ? e.message : String(e);
        throw new Error(`${cellId(entry.cell)} failed (reproduce: TIDEMARK_MATRIX_SEED=${SEED} TIDEMARK_MATRIX_ONLY=${JSON.stringify(cellId(entry.cell))}): ${entry.reason}`);
      } finally {
        entry.ms = Date.now() - t0;
        if (LOG) await appendFile(LOG, `${new Date().toISOString()} ${entry.status} ${(entry.ms / 1000).toFixed(1)}s ${cellId(entry.cell)} [${profile}]${entry.notFired ? ` (not fired: ${entry.notFired})` : ''}${entry.reason ? ` :: ${entry.reason.slice(0, 400)} (files kept in ${dir})` : ''}\n`);
      }
    });
    const test = CONCURRENCY > 1 ? (bug ? it.concurrent.fails : it.concurrent) : bug ? it.fails : it;
    test(name, body, CONCURRENCY > 1 ? 3_600_000 : 300_000);
  }
});
