/**
 * `tidemark ui` end to end: the built CLI serves the dashboard, headless Chromium reads it.
 * Needs `npm run build` first (as every CLI test) and /usr/bin/chromium (`.ci/run` installs it).
 */
import { existsSync } from 'node:fs';
import { cp, mkdir, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { DuckDBInstance } from '@duckdb/node-api';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli, startCli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../../helpers/shop.js';
import { destinationQuery, duckdbQuery } from '../../helpers/warehouse.js';
import { launchBrowser, startUi, type RunningUi } from './helpers.js';

const SCREENSHOT = fileURLToPath(new URL('../../../docs/ui-overview.png', import.meta.url));

interface StateJson {
  version: number;
  streams: Record<string, { watermark?: { cursor: { value: string }; pk: { value: string }[] } }>;
}

async function stateOf(config: string): Promise<StateJson> {
  const out = await cli(['state', 'show', '--json', '--config', config]);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout) as StateJson;
}

function watermarkText(w: StateJson['streams'][string]['watermark']): string {
  return w ? [w.cursor.value, ...w.pk.map((p) => p.value)].join(' / ') : 'none';
}

async function open(page: Page, url: string): Promise<void> {
  await page.goto(url);
  await page.waitForSelector('main[data-ready="true"]');
}

/** The few browser globals the page functions below touch (the test project is typed without the DOM lib). */
interface InPage {
  readonly document: { querySelector(selector: string): { dataset: Record<string, string>; textContent: string | null } | null };
  readonly location: { hash: string };
  readonly __pwned?: number;
}

/** Client-side navigation: wait for the new page's data, not the old one's. */
async function go(page: Page, hash: string): Promise<void> {
  await page.evaluate((h) => {
    const w = globalThis as unknown as InPage;
    w.document.querySelector('main')!.dataset.ready = 'false';
    w.location.hash = h;
  }, hash);
  await page.waitForSelector('main[data-ready="true"]');
}

let browser: Browser;
beforeAll(async () => {
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
});

describe('tidemark ui', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let ui: RunningUi | undefined;
  let page: Page;
  const pageErrors: string[] = [];

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-ui-'));
    page = await browser.newPage({ viewport: { width: 1280, height: 640 } });
    pageErrors.length = 0;
    page.on('pageerror', (e) => pageErrors.push(e.message));
  });
  afterEach(async () => {
    await page.close();
    await ui?.stop();
    ui = undefined;
    await cleanup();
  });

  async function demo(into = dir): Promise<string> {
    const out = await cli(['demo', '--dir', into]);
    expect(out.code, out.stderr).toBe(0);
    return join(into, 'pipeline.yaml');
  }

  it('shows both demo streams with their watermark and last run, a chart of the two runs, and no actions without the flag', async () => {
    // The demo runs the pipeline three times; the third moves nothing and is recorded too, so three runs show.
    const config = await demo();
    const state = await stateOf(config);
    ui = await startUi([dir]);
    await open(page, ui.url);

    const rows = page.locator('section[data-pipeline="shop"] tbody tr');
    expect(await rows.count()).toBe(2);
    for (const [stream, loaded] of [['orders', '0'], ['customers', '0']] as const) {
      const row = page.locator(`section[data-pipeline="shop"] tr[data-stream="${stream}"]`);
      expect(await row.locator('td.watermark').textContent()).toBe(watermarkText(state.streams[stream]!.watermark));
      expect(await row.locator('td.rows').textContent()).toBe(loaded);
      expect(await row.locator('td.outcome').textContent()).toBe('committed');
      expect(await row.locator('td.strategy').textContent()).toBe('incremental');
      expect(await row.locator('td.write').textContent()).toBe('merge');
    }
    expect(await page.locator('[data-action]').count()).toBe(0);
    expect(await page.locator('#mode').textContent()).toBe('read-only');
    expect(await page.locator('section[data-pipeline="shop"] [data-role="checked"]').textContent()).toMatch(/^last checked (just now|.+ ago)$/);
    if (!existsSync(SCREENSHOT) || process.env.UPDATE_SCREENSHOTS) {
      await mkdir(join(SCREENSHOT, '..'), { recursive: true });
      await page.setViewportSize({ width: 1280, height: 300 });
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      await page.setViewportSize({ width: 1280, height: 640 });
    }

    await go(page, '#/p/shop/s/orders');
    const chart = page.locator('.chart');
    expect(await chart.getAttribute('data-points')).toBe('3');
    await page.waitForSelector('.chart canvas');
    // Runs newest first: the third moved nothing, the second 37 rows, the first all 10,000.
    const log = page.locator('section:has(h2:text-is("Run log")) tbody tr');
    expect(await log.count()).toBe(3);
    expect(await log.nth(0).locator('td').nth(5).textContent()).toBe('0');
    expect(await log.nth(1).locator('td').nth(5).textContent()).toBe('37');
    expect(await log.nth(2).locator('td').nth(5).textContent()).toBe('10,000');
    // The stream's history: its watermark moved between the two runs that loaded; the third moved its run marks only.
    expect(await page.locator('.history tr[data-version]').count()).toBe(6);
    expect(await page.locator('[data-role="diff"]').textContent()).toContain('runCount');
    await page.waitForSelector('[data-role="plan"] dl.kv');
    expect(await page.locator('[data-role="plan"] dl.kv').textContent()).toContain('predicate');
    expect(await page.locator('[data-action]').count()).toBe(0);

    // Read-only means the server refuses, not only that the page hides the buttons.
    const refused = await page.evaluate(async () => {
      const res = await fetch('/api/pipelines/shop/reset', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"stream":"orders"}' });
      return res.status;
    });
    expect(refused).toBe(403);
    expect((await stateOf(config)).version).toBe(state.version);
    expect(pageErrors).toEqual([]);
  });

  it('shows the ledger of a partitioned stream as a grid with a changed partition', async () => {
    // The ledger API (issue 4) is not there yet: rows go straight into _tidemark_ledger with its schema.
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.duckdb');
    createItems(source, itemRange(1, 30, 3));
    const config = await writeYaml(dir, 'items.yaml', pipelineYaml({ source, destination: { type: 'duckdb', path: target } }));
    const loaded = await cli(['run', config]);
    expect(loaded.code, loaded.stderr).toBe(0);
    const ledger: [string, string, number][] = [['2024-01', 'loaded', 1000], ['2024-02', 'changed', 2000], ['2024-03', 'failed', 0], ['2024-04', 'missing', 0]];
    const values = ledger
      .map(([p, status, rows]) => `('items', 'items', '${p}', '[{"path":"items_${p}.parquet","size":123}]', ${rows}, 4096, '${status}', 'r1', '2024-05-01T00:00:00.000Z')`)
      .join(', ');
    await duckdbQuery(target, `INSERT INTO _tidemark_ledger (pipeline, stream, "partition", files, "rows", bytes, status, run_id, loaded_at) VALUES ${values}`);

    ui = await startUi([config]);
    await open(page, ui.url);
    expect(await page.locator('tr[data-stream="items"] td.strategy').textContent()).toContain('ledger');
    await go(page, '#/p/items/s/items');
    const cells = page.locator('[data-role="ledger"] .cell');
    expect(await cells.count()).toBe(4);
    const changed = page.locator('[data-role="ledger"] .cell[data-partition="2024-02"]');
    expect(await changed.getAttribute('data-status')).toBe('changed');
    expect(await changed.getAttribute('class')).toContain('status-changed');
    const tip = (await changed.getAttribute('title')) ?? '';
    expect(tip).toContain('changed since load');
    expect(tip).toContain('rows: 2,000');
    expect(tip).toContain('loaded_at: 2024-05-01T00:00:00.000Z');
    expect(await page.locator('[data-role="ledger"] .legend').textContent()).toContain('changed since load: 1');
    expect(await page.locator('[data-role="verify"]').textContent()).toContain('ledger verify');
    expect(pageErrors).toEqual([]);
  });

  it('renders markup from record values and error messages as text', async () => {
    const source = join(dir, 'source.sqlite');
    const db = new Database(source);
    db.exec(`CREATE TABLE notes (id TEXT PRIMARY KEY, updated_at TIMESTAMP NOT NULL, body TEXT)`);
    const evilId = '<script>window.__pwned = 1</script>';
    db.prepare(`INSERT INTO notes VALUES (?, ?, ?)`).run('a', '2024-01-01 00:00:00', 'plain');
    db.prepare(`INSERT INTO notes VALUES (?, ?, ?)`).run(evilId, '2024-01-02 00:00:00', '<img src=x onerror="window.__pwned = 2">');
    db.close();
    const evilTable = '<img src=x onerror="window.__pwned = 3">';
    const config = await writeYaml(
      dir,
      'notes.yaml',
      `name: notes
source: { type: sqlite, path: ${JSON.stringify(source)} }
streams:
  - { table: notes, primary_key: [id], cursor: updated_at }
  - { name: evil, table: ${JSON.stringify(evilTable)}, primary_key: [id], cursor: updated_at }
destination: { type: duckdb, path: ${JSON.stringify(join(dir, 'warehouse.duckdb'))} }
`,
    );
    const run = await cli(['run', config]);
    expect(run.code, run.stderr).toBe(1); // the evil stream fails; notes commits
    ui = await startUi([config]);
    await open(page, ui.url);
    expect(await page.locator('tr[data-stream="notes"] td.watermark').textContent()).toBe(`2024-01-02 00:00:00.000000 / ${evilId}`);
    expect(await page.locator('tr[data-stream="evil"] td.outcome').textContent()).toBe('failed');

    await go(page, '#/p/notes/s/evil');
    const error = await page.locator('pre[data-role="run-error"]').first().textContent();
    expect(error).toContain(evilTable);
    await go(page, '#/p/notes/s/notes');
    expect(await page.locator('[data-role="watermark"]').textContent()).toContain(evilId);

    expect(await page.evaluate(() => (globalThis as unknown as InPage).__pwned)).toBeUndefined();
    expect(await page.locator('main script, main img').count()).toBe(0);
    expect(pageErrors).toEqual([]);
  });

  it('shows a run stopped by SIGTERM as stopped, in its own colour, with its reason as a note rather than an error', async () => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.sqlite');
    createItems(source, itemRange(1, 50, 1));
    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'sqlite', path: target }, stream: { checkpoint_rows: 10, batch_rows: 10 } }));
    const run = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(3000)' });
    const committed = async () =>
      (await destinationQuery('sqlite', target, 'SELECT count(*) AS n FROM _tidemark_state').catch(() => [{ n: 0n }]))[0]!.n === 1n;
    for (let i = 0; i < 200 && !(await committed()); i += 1) await new Promise((r) => setTimeout(r, 100));
    run.child.kill('SIGTERM');
    expect((await run.done).code).toBe(143);

    ui = await startUi([config]);
    await open(page, ui.url);
    const badge = page.locator('tr[data-stream="items"] td.outcome .badge');
    expect(await badge.textContent()).toBe('stopped');
    expect(await badge.getAttribute('class')).toContain('outcome-stopped');
    expect(await badge.getAttribute('title')).toContain('stopped on purpose');
    const colours = await badge.evaluate((el) => {
      const style = (globalThis as unknown as { getComputedStyle(e: unknown): { backgroundColor: string; color: string } }).getComputedStyle(el);
      return `${style.backgroundColor} ${style.color}`;
    });
    // Not the grey of an unstyled badge, nor the colours of failed, running or committed.
    for (const other of ['rgb(238, 241, 245)', 'rgb(253, 236, 236)', 'rgb(232, 241, 255)', 'rgb(231, 246, 236)']) expect(colours).not.toContain(other);

    await go(page, '#/p/items/s/items');
    const note = page.locator('pre[data-role="run-error"]');
    expect(await note.textContent()).toMatch(/stopped \(interrupted by SIGTERM\)/);
    expect(await note.getAttribute('class')).toContain('stop-text');
    expect(pageErrors).toEqual([]);
  });

  it('shows the last known data and the lock holder while a run holds the pipeline', async () => {
    const config = await demo();
    const state = await stateOf(config);
    ui = await startUi([dir]);
    await open(page, ui.url);
    expect(await page.locator('[data-role="stale"]').count()).toBe(0);

    // Another process has the DuckDB file open (as a run would): the page keeps the data it read and says so.
    const holder = await DuckDBInstance.create(join(dir, 'warehouse.duckdb'));
    try {
      await new Promise((r) => setTimeout(r, 1200));
      await page.reload();
      await page.waitForSelector('main[data-ready="true"]');
      expect(await page.locator('[data-role="stale"]').textContent()).toContain('in use by another process');
      expect(await page.locator('tr[data-stream="orders"] td.watermark').textContent()).toBe(watermarkText(state.streams.orders!.watermark));
    } finally {
      holder.closeSync();
    }

    // A live lease names its holder; the dashboard does not even try to open the file meanwhile.
    const leaseDir = join(dir, 'warehouse.duckdb.locks', 'shop');
    await mkdir(leaseDir, { recursive: true });
    const acquiredAt = new Date().toISOString();
    await writeFile(
      join(leaseDir, 'lease-000000000099.json'),
      JSON.stringify({ token: 99, host: hostname(), pid: process.pid, acquiredAt, expiresAt: Date.now() + 60_000, released: false }),
    );
    await new Promise((r) => setTimeout(r, 1200));
    await page.reload();
    await page.waitForSelector('main[data-ready="true"]');
    expect(await page.locator('[data-role="lock"]').textContent()).toContain(`lease 99, pid ${process.pid}`);
    expect(await page.locator('[data-role="stale"]').textContent()).toContain('pipeline is running');
    expect(await page.locator('tr[data-stream="customers"] td.rows').textContent()).toBe('0');
  });

  it('with --allow-actions, reset asks first and then changes the state exactly as `tidemark state reset` does', async () => {
    const viaUi = join(dir, 'ui');
    const viaCli = join(dir, 'cli');
    await demo(viaUi);
    await cp(viaUi, viaCli, { recursive: true });
    const before = await stateOf(join(viaUi, 'pipeline.yaml'));

    ui = await startUi([viaUi, '--allow-actions']);
    await open(page, `${ui.url}#/p/shop/s/orders`);
    expect(await page.locator('#mode').textContent()).toBe('actions enabled');
    const reset = page.locator('[data-action="reset"]');

    await reset.click();
    await page.waitForSelector('dialog#confirm[open]');
    await page.click('#confirm-cancel');
    expect((await stateOf(join(viaUi, 'pipeline.yaml'))).version).toBe(before.version);

    // Without the page's token the server refuses, even with the flag.
    const forged = await page.evaluate(async () => {
      const res = await fetch('/api/pipelines/shop/reset', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"stream":"orders"}' });
      return res.status;
    });
    expect(forged).toBe(403);

    await reset.click();
    await page.waitForSelector('dialog#confirm[open]');
    expect(await page.locator('#confirm-text').textContent()).toContain('tidemark state reset orders');
    await page.click('#confirm-ok');
    await page.waitForSelector('#notice.ok');
    expect(await page.locator('#notice').textContent()).toContain('State of orders reset');

    const cliReset = await cli(['state', 'reset', 'orders', '--config', join(viaCli, 'pipeline.yaml')]);
    expect(cliReset.code, cliReset.stderr).toBe(0);
    const afterUi = await stateOf(join(viaUi, 'pipeline.yaml'));
    const afterCli = await stateOf(join(viaCli, 'pipeline.yaml'));
    expect(afterUi).toEqual(afterCli);
    expect(afterUi.version).toBe(before.version + 1);
    expect(afterUi.streams.orders).toBeUndefined();
    const history = async (d: string) => {
      const out = await cli(['state', 'history', '--json', '--config', join(d, 'pipeline.yaml')]);
      const [latest] = JSON.parse(out.stdout) as { version: number; reason: string; run_id: string | null; state: unknown }[];
      return { version: latest!.version, reason: latest!.reason, runId: latest!.run_id, state: latest!.state };
    };
    expect(await history(viaUi)).toEqual(await history(viaCli));

    // Run now goes through the same run as `tidemark run`: the reset stream is read again from the start.
    await page.waitForSelector('main[data-ready="true"]');
    await page.locator('[data-action="run"]').click();
    await page.waitForSelector('dialog#confirm[open]');
    await page.click('#confirm-ok');
    await page.waitForSelector('#notice.ok', { timeout: 30_000 });
    await page.waitForFunction(() => (globalThis as unknown as InPage).document.querySelector('#notice')?.textContent?.includes('orders committed'), undefined, { timeout: 60_000 });
    expect(await page.locator('#notice').textContent()).toContain('10,012 rows loaded');
    expect((await stateOf(join(viaUi, 'pipeline.yaml'))).streams.orders!.watermark).toEqual(before.streams.orders!.watermark);
    expect(pageErrors).toEqual([]);
  }, 120_000);
});
