/**
 * A Postgres destination whose connection is cut at a commit: the failure is a destination error of phase `commit`
 * (not `extract`), naming the server (user, host and database, never the password); the next run is exact.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange } from '../../helpers/shop.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { createPgDb, type PgTestDb } from '../../integration/postgres/pg-db.js';

const ROWS = 6_000;
let dir: string;
let cleanup: () => Promise<void>;
let proxy: TcpProxy;
let dst: PgTestDb;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
  proxy = await startTcpProxy({ host: '127.0.0.1', port: 5432 });
  dst = await createPgDb('tmdstcut');
});
afterEach(async () => {
  await proxy.close();
  await dst.drop();
  await cleanup();
});

it.each([true, false])('a destination connection cut at a commit fails in phase commit, naming the server (bulk %s)', async (bulk) => {
  const source = join(dir, 'source.sqlite');
  createItems(source, itemRange(1, ROWS, 7));
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: dstcut
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 2500
    batch_rows: 500
state: {type: file, path: ${JSON.stringify(join(dir, 'state'))}}
destination: {type: postgres, url: "postgres://postgres:hunter2secret@127.0.0.1:${proxy.port}/${dst.name}", schema: mirror}
`,
  );
  // The second commit waits 4 s just before COMMIT; the connection is cut then.
  const running = startCli(['run', '--json', config], { TIDEMARK_FAILPOINTS: 'load.before_commit=2:sleep(4000)', ...(bulk ? {} : { TIDEMARK_BULK: '0' }) });
  for (const deadline = Date.now() + 60_000; ; await new Promise((r) => setTimeout(r, 100))) {
    if (Date.now() > deadline) throw new Error(`no first commit: ${JSON.stringify(running.output())}`);
    const n = await dst.sql(`SELECT count(*) AS n FROM mirror.items`).catch(() => [{ n: '0' }]);
    if (Number(n[0]!.n) > 0) break;
  }
  await new Promise((r) => setTimeout(r, 1500));
  proxy.cut();
  const out = await running.done;
  expect(out.code, out.stderr).toBe(1);
  const stream = (JSON.parse(out.stdout) as { streams: { error_kind: string; error_phase: string; error: string }[] }).streams[0]!;
  expect(stream, out.stderr).toMatchObject({ error_kind: 'destination', error_phase: 'commit' });
  expect(stream.error).toContain(`127.0.0.1:${proxy.port}/${dst.name}`);
  expect(`${out.stdout}${out.stderr}`).not.toContain('hunter2secret');
  const next = await cli(['run', '--json', config]);
  expect(next.code, next.stderr).toBe(0);
  expect(await dst.sql(`SELECT count(*) AS n, count(DISTINCT id) AS d FROM mirror.items`)).toEqual([{ n: String(ROWS), d: String(ROWS) }]);
}, 120_000);
