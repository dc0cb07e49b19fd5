/**
 * Signals stop a run cleanly: SIGHUP (a closed terminal) as SIGTERM and SIGINT do — the run recorded `stopped`, its
 * lease released, exit 129 — and a second signal exits at once with a message, committing nothing more; the next run
 * is exact either way.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange } from '../../helpers/shop.js';
import { sqliteQuery } from '../../helpers/warehouse.js';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

async function setup(): Promise<{ config: string; target: string }> {
  const source = join(dir, 'source.sqlite');
  const target = join(dir, 'w.sqlite');
  createItems(source, itemRange(1, 300, 3));
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: items
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 50
    batch_rows: 25
destination: {type: sqlite, path: ${JSON.stringify(target)}}
`,
  );
  return { config, target };
}

/** Started, past its first commit, paused inside the second batch of the next transaction. */
async function pausedRun(config: string, target: string) {
  const running = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(8000)' });
  for (const deadline = Date.now() + 30_000; ; await new Promise((r) => setTimeout(r, 100))) {
    if (Date.now() > deadline) throw new Error(`no first commit: ${JSON.stringify(running.output())}`);
    try {
      if (Number(sqliteQuery(target, 'SELECT count(*) AS n FROM items')[0]!.n) > 0) break;
    } catch {
      // not created yet
    }
  }
  return running;
}

function leaseRecord(target: string): { released: boolean } {
  const leases = join(`${target}.locks`, 'items');
  const files = readdirSync(leases).filter((f) => /^lease-\d+\.json$/.test(f)).sort();
  return JSON.parse(readFileSync(join(leases, files.at(-1)!), 'utf8'));
}

describe('signals', () => {
  it('SIGHUP stops the run: recorded stopped, lease released, exit 129', async () => {
    const { config, target } = await setup();
    const running = await pausedRun(config, target);
    running.child.kill('SIGHUP');
    const out = await running.done;
    expect(out.code, out.stderr).toBe(129);
    expect(leaseRecord(target).released).toBe(true);
    const runs = JSON.parse((await cli(['runs', '--json', '--config', config])).stdout);
    expect(runs[0]).toMatchObject({ outcome: 'stopped' });
    const next = await cli(['run', '--json', config]);
    expect(next.code, next.stderr).toBe(0);
    expect(sqliteQuery(target, 'SELECT count(*) AS n, count(DISTINCT id) AS d FROM items')[0]).toEqual({ n: 300n, d: 300n });
  }, 60_000);

  it('a second SIGINT exits at once with a message; nothing uncommitted lands and the next run is exact', async () => {
    const { config, target } = await setup();
    const running = await pausedRun(config, target);
    const committed = Number(sqliteQuery(target, 'SELECT count(*) AS n FROM items')[0]!.n);
    running.child.kill('SIGINT');
    await new Promise((r) => setTimeout(r, 200));
    running.child.kill('SIGINT');
    const started = Date.now();
    const out = await running.done;
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(out.code, out.stderr).toBe(130);
    expect(out.stderr).toMatch(/second SIGINT/);
    expect(Number(sqliteQuery(target, 'SELECT count(*) AS n FROM items')[0]!.n)).toBe(committed);
    const next = await cli(['run', '--json', config]);
    expect(next.code, next.stderr).toBe(0);
    expect(sqliteQuery(target, 'SELECT count(*) AS n, count(DISTINCT id) AS d FROM items')[0]).toEqual({ n: 300n, d: 300n });
  }, 60_000);
});
