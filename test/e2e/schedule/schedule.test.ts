/** `tidemark schedule`: ticks, overlap skip, catch-up after downtime, --once, graceful stop, --queue. */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../../helpers/shop.js';
import { sqliteQuery } from '../../helpers/warehouse.js';
import { openQueue, queueArgs, uniqueQueueName, waitFor } from '../../integration/queue/queue-fixture.js';

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-schedule-')));
afterAll(() => cleanup());

let n = 0;
async function pipeline(extra: string, rows = 60): Promise<{ dir: string; config: string; target: string }> {
  const dir = join(root, `p${(n += 1)}`);
  await import('node:fs/promises').then((fs) => fs.mkdir(dir, { recursive: true }));
  const source = join(dir, 'source.sqlite');
  const target = join(dir, 'warehouse.sqlite');
  createItems(source, itemRange(1, rows, 4));
  const config = await writeYaml(
    dir,
    'items.yaml',
    pipelineYaml({ source, destination: { type: 'sqlite', path: target }, stream: { write: 'append', checkpoint_rows: 10, batch_rows: 10 }, extra }),
  );
  return { dir, config, target };
}

function schedule(args: string[], env: Record<string, string> = {}) {
  const started = startCli(['schedule', ...args], { TIDEMARK_LOG_LEVEL: 'info', ...env });
  let stderr = '';
  started.child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return { ...started, stderr: () => stderr };
}

const count = (target: string) => Number(sqliteQuery(target, 'SELECT COUNT(*) AS n FROM items')[0]!.n);

describe('tidemark schedule', () => {
  it('ticks on the cron, records the tick, skips a tick that overlaps a running run, exits 0 on SIGTERM', async () => {
    const { dir, config, target } = await pipeline('schedule: "* * * * * *"\n');
    // The first run sleeps 2.5 s, so at least one tick comes while it runs.
    const s = schedule([dir], { TIDEMARK_FAILPOINTS: 'extract.after_batch=1:sleep(2500)' });
    await waitFor('a skipped tick', () => /skipped: previous run still going \(overlap: skip\)/.test(s.stderr()), 15_000);
    await waitFor('a committed run', () => /committed/.test(s.stderr()), 15_000);
    s.child.kill('SIGTERM');
    const done = await s.done;
    expect(done.code, s.stderr()).toBe(0);
    expect(count(target)).toBe(60);
    const ticks = JSON.parse(await readFile(join(dir, '.tidemark-schedule.json'), 'utf8'));
    expect(Date.parse(ticks.pipelines.items.last_tick)).toBeGreaterThan(Date.now() - 60_000);
    expect(config).toBeTruthy();
  });

  it('catch_up latest runs once for ticks missed while down; catch_up none does not', async () => {
    for (const catchUp of ['latest', 'none'] as const) {
      const { dir, target } = await pipeline(`schedule: "0 * * * *"\ntimezone: Europe/Berlin\ncatch_up: ${catchUp}\n`);
      const threeHoursAgo = new Date(Date.now() - 3 * 3600_000).toISOString();
      await writeFile(join(dir, '.tidemark-schedule.json'), JSON.stringify({ version: 1, pipelines: { items: { last_tick: threeHoursAgo } } }));
      const s = schedule([dir]);
      await waitFor('the catch-up decision', () => /missed tick/.test(s.stderr()), 15_000);
      if (catchUp === 'latest') await waitFor('the catch-up run', () => /committed/.test(s.stderr()), 15_000);
      s.child.kill('SIGTERM');
      expect((await s.done).code, s.stderr()).toBe(0);
      if (catchUp === 'latest') expect(count(target)).toBe(60);
      else expect(s.stderr()).not.toMatch(/committed/);
    }
  });

  it('--once runs what is due and exits; a second --once finds nothing due', async () => {
    const { dir, target } = await pipeline('schedule: "*/5 * * * *"\n');
    const first = await cli(['schedule', '--once', dir, '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout)).toMatchObject([{ pipeline: 'items', outcome: 'committed' }]);
    expect(count(target)).toBe(60);
    const second = await cli(['schedule', '--once', dir, '--json']);
    expect(second.code).toBe(0);
    expect(JSON.parse(second.stdout)).toEqual([]);
  });

  it('retry: a failed --once tick is retried by the next --once after its backoff, and lands every row once', async () => {
    const { dir, target } = await pipeline('schedule: "*/5 * * * *"\nretry: {count: 2, backoff: 1s}\n');
    const failed = await cli(['schedule', '--once', dir, '--json'], { env: { TIDEMARK_FAILPOINTS: 'extract.after_batch=2:throw', TIDEMARK_LOG_LEVEL: 'info' } });
    expect(failed.code).toBe(1);
    expect(JSON.parse(failed.stdout)).toMatchObject([{ pipeline: 'items', outcome: 'failed' }]);
    expect(failed.stderr).toMatch(/items: tick \S+ failed; retry 1\/2 at /);
    const ticks = JSON.parse(await readFile(join(dir, '.tidemark-schedule.json'), 'utf8'));
    expect(ticks.pipelines.items.retry).toMatchObject({ failures: 1 });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const retried = await cli(['schedule', '--once', dir, '--json'], { env: { TIDEMARK_LOG_LEVEL: 'info' } });
    expect(retried.code, retried.stderr).toBe(0);
    expect(JSON.parse(retried.stdout)).toMatchObject([{ pipeline: 'items', outcome: 'committed', retry: 1 }]);
    expect(retried.stderr).toMatch(/committed on retry 1/);
    expect(count(target)).toBe(60);
    const after = await cli(['schedule', '--once', dir, '--json']);
    expect(JSON.parse(after.stdout)).toEqual([]);
  });

  it('retry: the running scheduler retries a failed tick after its backoff', async () => {
    const { dir, target } = await pipeline('schedule: "0 * * * *"\nretry: {count: 1, backoff: 1s}\n');
    await writeFile(join(dir, '.tidemark-schedule.json'), JSON.stringify({ version: 1, pipelines: { items: { last_tick: new Date(Date.now() - 2 * 3600_000).toISOString() } } }));
    // The catch-up run fails after its first commit; the retry (the failpoint fires once per process) completes it.
    const s = schedule([dir], { TIDEMARK_FAILPOINTS: 'extract.after_batch=2:throw' });
    await waitFor('the retry', () => /committed on retry 1/.test(s.stderr()), 30_000);
    s.child.kill('SIGTERM');
    expect((await s.done).code, s.stderr()).toBe(0);
    expect(s.stderr()).toMatch(/failed; retry 1\/1 at /);
    expect(count(target)).toBe(60);
  });

  it('SIGTERM past --grace rolls back the running run and still exits 0; a later run completes exactly', async () => {
    const { dir, config, target } = await pipeline('schedule: "* * * * * *"\n', 200);
    // After its first commit the run stalls 4 s; the grace is 1 s, so shutdown aborts it at its next batch.
    const s = schedule([dir, '--grace', '1s'], { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(4000)' });
    await waitFor('the first commit', () => {
      try {
        return count(target) > 0;
      } catch {
        return false;
      }
    }, 15_000);
    s.child.kill('SIGTERM');
    const done = await s.done;
    expect(done.code, s.stderr()).toBe(0);
    expect(s.stderr()).toMatch(/grace period over/);
    expect(count(target)).toBeLessThan(200);
    const again = await cli(['run', config]);
    expect(again.code, again.stderr).toBe(0);
    expect(count(target)).toBe(200);
    expect(Number(sqliteQuery(target, 'SELECT COUNT(DISTINCT id) AS n FROM items')[0]!.n)).toBe(200);
  });

  it('with --queue, ticks become queue jobs instead of runs', async () => {
    const name = uniqueQueueName('sched');
    const { queue, close } = openQueue(name);
    try {
      const { dir, target } = await pipeline('schedule: "*/5 * * * *"\n');
      const once = await cli(['schedule', '--once', dir, ...queueArgs(name), '--json']);
      expect(once.code, once.stderr).toBe(0);
      expect(JSON.parse(once.stdout)).toMatchObject([{ pipeline: 'items', outcome: 'queued' }]);
      const waiting = await queue.getWaiting();
      expect(waiting.map((j) => j.data.stream)).toEqual(['items']);
      expect(() => count(target)).toThrow();
    } finally {
      await close();
    }
  });
});

describe('schedule config', () => {
  const base = 'name: p\nsource: { type: sqlite, path: s.sqlite }\nstreams:\n  - { table: t, cursor: c }\n';
  it('defaults to overlap skip and catch_up latest, and rejects a bad cron or zone with a clear message', async () => {
    const { parsePipeline } = await import('../../../src/index.js');
    const p = parsePipeline(`${base}schedule: "*/5 * * * *"\ntimezone: Europe/Berlin\n`);
    expect([p.schedule, p.timezone, p.overlap, p.catchUp]).toEqual(['*/5 * * * *', 'Europe/Berlin', 'skip', 'latest']);
    expect(() => parsePipeline(`${base}schedule: "every hour"\n`)).toThrow(/schedule: .*five, six, or seven/);
    expect(() => parsePipeline(`${base}schedule: "0 * * * *"\ntimezone: Mars/Olympus\n`)).toThrow(/timezone: unknown time zone "Mars\/Olympus"/);
    expect(() => parsePipeline(`${base}overlap: wait\n`)).toThrow(/overlap/);
  });
});
