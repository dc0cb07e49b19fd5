/**
 * Exit code 3 means another live run holds the pipeline (a scheduler skips it); a run that lost its own lease (its
 * lease session ended, its lease taken over while it was frozen) failed: exit 1, with an error saying so, and its
 * uncommitted rows are not in the destination.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange } from '../../helpers/shop.js';
import { createPgDb, type PgTestDb } from '../../integration/postgres/pg-db.js';

let dir: string;
let cleanup: () => Promise<void>;
let pgDb: PgTestDb | undefined;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(async () => {
  await pgDb?.drop();
  pgDb = undefined;
  await cleanup();
});

function yaml(source: string, destination: string, extra = ''): string {
  return `name: items
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 40
    batch_rows: 20
destination: ${destination}
${extra}`;
}

async function until(what: string, check: () => Promise<boolean> | boolean, ms = 30_000): Promise<void> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) if (await check()) return;
  throw new Error(`timed out waiting for ${what}`);
}

it('a run whose Postgres lease session was terminated exits 1 saying it lost its lease, and commits nothing more', async () => {
  pgDb = await createPgDb('tm_lost');
  const source = join(dir, 'source.sqlite');
  createItems(source, itemRange(1, 200, 3));
  const config = await writeYaml(dir, 'p.yaml', yaml(source, `{type: postgres, url: ${JSON.stringify(pgDb.url)}, schema: w}`));
  // The run pauses after its first batch, before its first commit.
  const running = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'extract.after_batch=1:sleep(6000)' });
  const db = pgDb;
  await until('the lease', async () => (await db.sql(`SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'tidemark-lease' AND a.datname = current_database()`)).length > 0);
  await db.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'tidemark-lease'`);
  const out = await running.done;
  expect(out.code, out.stderr).toBe(1);
  expect(out.stderr).toMatch(/this run lost its lease: the lease session of pipeline items/);
  expect(await db.sql(`SELECT count(*)::int AS n FROM w.items`).catch(() => [{ n: 0 }])).toEqual([{ n: 0 }]);
  // Nothing else holds the pipeline: the next run loads everything.
  const next = await cli(['run', '--json', config]);
  expect(next.code, next.stderr).toBe(0);
  expect(JSON.parse(next.stdout).streams[0].rows_loaded).toBe(200);
});

it('a run whose file lease was taken over while it paused exits 1 saying so; the taker is not disturbed', async () => {
  const source = join(dir, 'source.sqlite');
  const target = join(dir, 'w.sqlite');
  createItems(source, itemRange(1, 200, 3));
  const config = await writeYaml(dir, 'p.yaml', yaml(source, `{type: sqlite, path: ${JSON.stringify(target)}}`, 'lock_ttl: 1s\n'));
  const running = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'extract.after_batch=1:sleep(6000)' });
  const leases = join(`${target}.locks`, 'items');
  const holding = (): string | undefined =>
    readdirSync(leases, { withFileTypes: true })
      .map((e) => e.name)
      .filter((f) => /^lease-\d+\.json$/.test(f))
      .find((f) => JSON.parse(readFileSync(join(leases, f), 'utf8')).pid === running.child.pid);
  await until('the lease', () => {
    try {
      return holding() !== undefined;
    } catch {
      return false;
    }
  });
  // Once it sleeps after its first batch, it is frozen past its 1 s lease, and another run takes the pipeline.
  await new Promise((r) => setTimeout(r, 2000));
  running.child.kill('SIGSTOP');
  await new Promise((r) => setTimeout(r, 1500));
  const taker = await cli(['run', '--json', config]);
  running.child.kill('SIGCONT');
  expect(taker.code, taker.stderr).toBe(0);
  const out = await running.done;
  expect(out.code, `${out.stdout}\n${out.stderr}\n${taker.stdout}`).toBe(1);
  expect(out.stderr).toMatch(/this run lost its lease/);
  // The taker's lease record stays as it left it: released, newest.
  const files = readdirSync(leases).filter((f) => /^lease-\d+\.json$/.test(f)).sort();
  expect(JSON.parse(readFileSync(join(leases, files.at(-1)!), 'utf8'))).toMatchObject({ released: true });
});
