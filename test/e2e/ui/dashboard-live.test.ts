/**
 * The dashboard's view of what goes on now: a running stream's live figures, each run's log lines, the next
 * scheduled run, schema versions, and freshness as two figures (checked when, newest row how old).
 * Built CLI and headless Chromium, as test/e2e/ui/dashboard.test.ts.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../../helpers/shop.js';
import { launchBrowser, startUi, type RunningUi } from './helpers.js';

const ROWS = 12_000;

let browser: Browser;
beforeAll(async () => {
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
});

describe('tidemark ui: what goes on now', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let ui: RunningUi | undefined;
  let page: Page;
  let journal: string;
  const previousJournal = process.env.TIDEMARK_JOURNAL_DIR;

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-ui-live-'));
    // Runs and the dashboard spawned below inherit it: the journal lives in this test's folder.
    journal = join(dir, 'journal');
    process.env.TIDEMARK_JOURNAL_DIR = journal;
    page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  });
  afterEach(async () => {
    await page.close();
    await ui?.stop();
    ui = undefined;
    if (previousJournal === undefined) delete process.env.TIDEMARK_JOURNAL_DIR;
    else process.env.TIDEMARK_JOURNAL_DIR = previousJournal;
    await cleanup();
  });

  async function pipeline(extra = '', stream: Record<string, unknown> = {}): Promise<{ config: string; source: string }> {
    const source = join(dir, 'shop.sqlite');
    createItems(source, itemRange(1, ROWS, 7));
    const config = join(dir, 'items.yaml');
    await writeFile(config, pipelineYaml({ source, destination: { type: 'duckdb', path: join(dir, 'warehouse.duckdb') }, stream: { checkpoint_rows: 3000, ...stream }, extra }));
    return { config, source };
  }

  it('shows a ranged load\'s ranges done of all its ranges beside its rows and rate', async () => {
    // 12,000 rows as 4 rowid ranges of ~3,000 (SQLite has no row estimate: no total), the run hangs after its second range.
    const { config } = await pipeline('', { parallel: 2, range_rows: 3000, checkpoint_rows: 1500 });
    const running = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'range.after_commit=2:hang' });
    try {
      ui = await startUi([config]);
      const live = page.locator('tr[data-stream="items"] [data-role="live"]');
      await expect.poll(async () => {
        await open();
        return (await live.count()) > 0 ? await live.textContent() : null;
      }, { timeout: 30_000, interval: 500 }).toMatch(/^running: 6,000 rows read · [1-9][\d,]* rows\/s · 2 of 4 ranges done$/);
    } finally {
      running.child.kill('SIGKILL');
      await running.done;
    }
  });

  async function open(hash = ''): Promise<void> {
    await page.goto(`${ui!.url}${hash}`);
    await page.waitForSelector('main[data-ready="true"]');
  }

  it('shows a running stream\'s rows read and rate while the run holds the destination, and nothing once its process is gone', async () => {
    const { config } = await pipeline();
    // The run hangs before its second commit (6,000 rows read in three chunks and more), holding the DuckDB file.
    const running = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.before_commit=2:hang' });
    try {
      ui = await startUi([config]);
      const live = page.locator('tr[data-stream="items"] [data-role="live"]');
      // It waits before its second commit with 6,000 rows read: the newest figures reach the page.
      await expect.poll(async () => {
        await open();
        return (await live.count()) > 0 ? await live.textContent() : null;
      }, { timeout: 30_000, interval: 500 }).toMatch(/^running: 6,000 rows read · [1-9][\d,]* rows\/s$/);
      await open('#/p/items/s/items');
      expect(await page.locator('[data-role="live"]').textContent()).toMatch(/^running: /);
    } finally {
      running.child.kill('SIGKILL');
      await running.done;
    }
    // A killed run leaves its live file behind; its process is gone, so the page no longer says it runs.
    await open();
    expect(await page.locator('tr[data-stream="items"] [data-role="live"]').count()).toBe(0);
  });

  it('keeps each run\'s log lines and shows the schema versions a stream committed', async () => {
    const { config, source } = await pipeline();
    const db = new Database(source);
    db.exec(`ALTER TABLE items ADD COLUMN note TEXT; UPDATE items SET note = 'n' || id`);
    expect((await cli(['run', config])).code).toBe(0);
    // The source drops a column, and 2,500 rows change: the run warns and keeps the column (NULL from now on).
    db.exec(`ALTER TABLE items DROP COLUMN note`);
    db.prepare(`UPDATE items SET updated_at = '2024-06-01 00:00:00.000000' WHERE id > ?`).run(ROWS - 2500);
    db.close();
    const second = await cli(['run', config]);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stderr).toContain('schema change');
    ui = await startUi([config]);
    await open('#/p/items/s/items');
    const versions = page.locator('[data-role="schema-versions"] tbody tr');
    expect(await versions.count()).toBe(2);
    expect(await versions.first().textContent()).toContain('note');
    expect(await versions.last().textContent()).toContain('schema recorded');
    // The newest run's warning is in its log lines, as the CLI printed it.
    const lines = page.locator('[data-role="run-lines"]');
    expect(await lines.count()).toBe(1);
    await lines.locator('summary').click();
    expect(await lines.locator('pre').textContent()).toContain('schema change');
    expect(await page.locator('[data-role="schema"]').textContent()).toBe('4 columns, 1 dropped in the source');
  });

  it('gives freshness as when a run last checked and how old the newest row is, and the next scheduled run', async () => {
    const { config } = await pipeline(`schedule: "*/10 * * * *"\ntimezone: UTC\n`);
    expect((await cli(['run', config])).code).toBe(0);
    expect((await cli(['run', config])).code).toBe(0); // found nothing new: still a check
    ui = await startUi([config]);
    await open();
    const row = page.locator('tr[data-stream="items"]');
    expect(await row.locator('[data-role="checked-at"]').textContent()).toMatch(/^checked (just now|\d+(\.\d+)? s ago)$/);
    // The newest row of the fixture is from January 2024: old, though the table is up to date.
    expect(await row.locator('[data-role="newest-row"]').textContent()).toMatch(/^ · newest row \d+d( \d+h)? old$/);
    const next = await page.locator('[data-role="next-run"]').first().textContent();
    const at = /\((\d{4}-\d\d-\d\d \d\d:(\d\d):00) UTC\)$/.exec(next!);
    expect(at, next!).not.toBeNull();
    expect(Number(at![2]) % 10).toBe(0);
    expect(next).toMatch(/^next run in /);
  });
});
