/**
 * Scheduled verification (`verify: {every, sample}`): a run verifies after itself when the last verify is older
 * than `every`; the result is kept per stream (`lastVerify`) across later runs and shown by `runs`, `runs --json`
 * (`last_verify`) and `state show`; drift is notified once until a verify finds the stream clean again;
 * `verify --sample` compares a fraction of the ranges. The source changes cross chunks and checkpoints.
 */
import { createServer, type Server } from 'node:http';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange } from '../helpers/shop.js';

/** Scheduled verify lines are info lines: a quiet run logs only a drift. */
const INFO = { TIDEMARK_LOG_LEVEL: 'info' };
let root: string;
let cleanup: () => Promise<void>;
let server: Server;
const notices: { event: string; stream?: string; message: string }[] = [];
let url = '';
beforeAll(async () => {
  ({ dir: root, cleanup } = await tempDir());
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      notices.push(JSON.parse(body));
      res.end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const address = server.address();
  url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/hook`;
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
  await cleanup();
});

function yaml(source: string, warehouse: string, every: string): string {
  return `name: sched
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    write: merge
    checkpoint_rows: 300
    batch_rows: 90
destination: {type: duckdb, path: ${JSON.stringify(warehouse)}}
verify: {every: ${every}, sample: 1}
notify:
  - webhook: ${url}
    on: [drift]
`;
}

describe('verify: in a pipeline', () => {
  it('verifies after runs when due, keeps and shows the last result, notifies drift once until clean', async () => {
    const dir = join(root, 'sched');
    await mkdir(dir, { recursive: true });
    const source = join(dir, 's.sqlite');
    const warehouse = join(dir, 'w.duckdb');
    createItems(source, itemRange(1, 2_000, 5));
    const config = await writeYaml(dir, 'p.yaml', yaml(source, warehouse, '1h'));

    const first = await cli(['run', config], { env: INFO });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toMatch(/scheduled verify: items equal/);
    const shown = JSON.parse((await cli(['state', 'show', '--config', config, '--json'])).stdout);
    const last = shown.streams?.items?.last_verify ?? shown.state?.streams?.items?.last_verify;
    expect((await cli(['state', 'show', '--config', config])).stdout).toMatch(/last verify: equal at \S+; source 2000 rows, destination 2000/);
    expect(last).toMatchObject({ status: 'equal', source_rows: 2000, destination_rows: 2000, missing: 0, extra: 0, changed: 0 });

    // Not due again within the hour: the next run does not verify; the result stays in the state through it.
    const db = new Database(source);
    db.prepare(`DELETE FROM items WHERE id IN (7, 1507)`).run(); // deletes an incremental read never sees
    db.prepare(`UPDATE items SET value = 'quiet' WHERE id = 1200`).run(); // an update that left the cursor alone
    db.close();
    const second = await cli(['run', config], { env: INFO });
    expect(second.code, second.stderr).toBe(0);
    expect(second.stderr).not.toMatch(/scheduled verify/);
    const runs = JSON.parse((await cli(['runs', '--config', config, '--json'])).stdout);
    expect(runs[0].last_verify).toMatchObject({ status: 'equal', source_rows: 2000 });

    // Due every second: the run verifies, finds the drift, notifies once.
    const due = await writeYaml(dir, 'p.yaml', yaml(source, warehouse, '1ms'));
    const third = await cli(['run', due], { env: INFO });
    expect(third.code, third.stderr).toBe(0);
    expect(third.stderr).toMatch(/scheduled verify: items DRIFT .*0 missing, 2 extra, 1 changed/);
    const text = await cli(['runs', '--config', due]);
    expect(text.stdout).toMatch(/last verify {2}items {2}drift {2}at \S+ {2}0 missing, 2 extra, 1 changed/);
    const fourth = await cli(['run', due], { env: INFO });
    expect(fourth.code, fourth.stderr).toBe(0);
    expect(fourth.stderr).toMatch(/scheduled verify: items DRIFT/);
    expect(notices.filter((n) => n.event === 'drift')).toHaveLength(1);
    expect(notices[0]!.message).toMatch(/sched\.items: 2 extra \(7 1507\); 1 changed \(1200\)/);

    // A sampled verify from the CLI compares part of the ranges; a repair makes the stream clean, so the next
    // drift would be notified again.
    const sampled = JSON.parse((await cli(['verify', due, '--sample', '0.25', '--json'])).stdout);
    expect(sampled.streams[0].sample).toBe(0.25);
    expect(sampled.streams[0].source_rows).toBeLessThan(1998);
    expect((await cli(['verify', due, '--sample', '2'])).code).toBe(2);
    const repaired = await cli(['verify', due, '--repair', '--json']);
    expect(repaired.code, repaired.stderr).toBe(0);
    const after = JSON.parse((await cli(['runs', '--config', due, '--json'])).stdout);
    expect(after[0].last_verify).toMatchObject({ status: 'equal', repaired: true });
    const db2 = new Database(source);
    db2.prepare(`DELETE FROM items WHERE id = 99`).run();
    db2.close();
    expect((await cli(['run', due], { env: INFO })).code).toBe(0);
    expect(notices.filter((n) => n.event === 'drift')).toHaveLength(2);
  }, 240_000);
});
