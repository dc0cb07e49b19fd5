/**
 * Dashboard details a user tripped over, each in Chromium: Cancel on a partition's "Reload?" only closes; a pipeline
 * whose file was busy from the start shows "unknown", not "never"/"none"; partitioned streams show their partitions;
 * the chart's y axes leave room for their tick labels; a notice does not follow the user to another page.
 */
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../../fixtures/taxi.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { launchBrowser, startUi, type RunningUi } from './helpers.js';

/** The few browser globals the page functions below touch (the test project is typed without the DOM lib). */
interface ChartAxis {
  readonly _size: number;
  readonly _values: readonly string[] | null;
  readonly font: readonly [string, number];
  readonly gap: number;
  readonly ticks: { readonly size: number };
}
interface InPage {
  readonly document: {
    querySelector(selector: string): ({ dataset: Record<string, string>; uplot?: { axes: ChartAxis[] } } & object) | null;
    createElement(tag: 'canvas'): { getContext(kind: '2d'): { font: string; measureText(text: string): { width: number } } };
  };
  readonly location: { hash: string };
  readonly devicePixelRatio: number;
}

let browser: Browser;
beforeAll(async () => {
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
});

describe('tidemark ui, details', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let ui: RunningUi | undefined;
  let page: Page;

  beforeEach(async () => {
    ({ dir, cleanup } = await tempDir('tidemark-ui-fixes-'));
    page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  });
  afterEach(async () => {
    await page.close();
    await ui?.stop();
    ui = undefined;
    await cleanup();
  });

  async function open(url: string): Promise<void> {
    await page.goto(url);
    await page.waitForSelector('main[data-ready="true"]');
  }

  async function go(hash: string): Promise<void> {
    await page.evaluate((h) => {
      const w = globalThis as unknown as InPage;
      w.document.querySelector('main')!.dataset.ready = 'false';
      w.location.hash = h;
    }, hash);
    await page.waitForSelector('main[data-ready="true"]');
  }

  /** A partitioned files pipeline of three months (3,000 rows each) into DuckDB, loaded once. */
  async function trips(): Promise<string> {
    const data = join(dir, 'data');
    for (const m of [1, 2, 3]) await writeTaxiMonth(join(data, 'trips', `yellow_tripdata_2024-0${m}.parquet`), { year: 2024, month: m, rows: 3000, seed: m });
    const config = await writeYaml(
      dir,
      'trips.yaml',
      `name: trips\nsource: {type: files, location: ${JSON.stringify(data)}}\nstreams:\n  - name: trips\n    pattern: trips/yellow_tripdata_{month}.parquet\n    partition_column: month\ndestination: {type: duckdb, path: ${JSON.stringify(join(dir, 'w.duckdb'))}}\n`,
    );
    const loaded = await cli(['run', config]);
    expect(loaded.code, loaded.stderr).toBe(0);
    return config;
  }

  /** One frame later: whatever a click set off in the page has happened. */
  const settle = () => page.evaluate(() => new Promise((resolve) => (globalThis as unknown as { requestAnimationFrame(f: () => void): void }).requestAnimationFrame(() => resolve(null))));

  it('Cancel on a partition tile\'s "Reload?" closes it and opens nothing else', async () => {
    const config = await trips();
    ui = await startUi([config, '--allow-actions']);
    await open(`${ui.url}#/p/trips/s/trips`);
    await page.locator('[data-role="ledger"] .cell[data-partition="2024-02"]').click();
    await page.locator('[data-role="partition-menu"] [data-action="ledger-reload"]').click();
    await page.waitForSelector('dialog#confirm[open]');
    expect(await page.locator('#confirm-title').textContent()).toBe('Reload partition 2024-02?');
    await page.click('#confirm-cancel');
    await settle();
    expect(await page.locator('dialog#confirm[open]').count()).toBe(0);
    // The page rebuilds itself every few seconds; the open menu outlives that.
    const refreshed = await page.locator('#refreshed').textContent();
    await page.waitForFunction((before) => (globalThis as unknown as { document: { querySelector(s: string): { textContent: string | null } } }).document.querySelector('#refreshed').textContent !== before, refreshed, { timeout: 20_000 });
    expect(await page.locator('[data-role="partition-menu"]').textContent()).toContain('partition 2024-02');
    // Forget is a choice of its own, not what follows a cancelled reload.
    await page.locator('[data-role="partition-menu"] [data-action="ledger-forget"]').click();
    await page.waitForSelector('dialog#confirm[open]');
    expect(await page.locator('#confirm-title').textContent()).toBe('Forget partition 2024-02?');
    await page.click('#confirm-cancel');
    await settle();
    expect(await page.locator('dialog#confirm[open]').count()).toBe(0);
    const ledger = JSON.parse((await cli(['ledger', 'list', '--json', '--config', config])).stdout) as { partition: string }[];
    expect(ledger.map((x) => x.partition)).toEqual(['2024-01', '2024-02', '2024-03']);
  });

  it('shows a partitioned stream\'s partitions loaded and the latest one instead of an empty watermark and lag', async () => {
    const config = await trips();
    ui = await startUi([config]);
    await open(ui.url);
    const row = page.locator('tr[data-stream="trips"]');
    expect(await row.locator('td.watermark').textContent()).toBe('3 partitions loaded · latest 2024-03');
    expect(await row.locator('td.lag').textContent()).toMatch(/^loaded .+ ago$|^loaded just now$/);
    await go('#/p/trips/s/trips');
    expect(await page.locator('[data-role="partitions"]').textContent()).toBe('3');
    expect(await page.locator('[data-role="latest-partition"]').textContent()).toMatch(/^2024-03 \(loaded /);
    expect(await page.locator('[data-role="watermark"]').count()).toBe(0);
  });

  it('shows "unknown", not "never" and "none", for a pipeline whose file was busy since the dashboard started', async () => {
    const demo = await cli(['demo', '--dir', dir]);
    expect(demo.code, demo.stderr).toBe(0);
    const holder = await DuckDBInstance.create(join(dir, 'warehouse.duckdb'));
    try {
      ui = await startUi([join(dir, 'pipeline.yaml')]);
      await open(ui.url);
      expect(await page.locator('[data-role="stale"]').textContent()).toContain('in use by another process');
      const row = page.locator('tr[data-stream="orders"]');
      for (const cell of ['watermark', 'lag', 'outcome']) expect(await row.locator(`td.${cell}`).textContent(), cell).toBe('unknown');
      await go('#/p/shop/s/orders');
      expect(await page.locator('[data-role="watermark"]').textContent()).toBe('unknown');
    } finally {
      holder.closeSync();
    }
  });

  it('sizes the chart\'s y axes to their tick labels, so the axis label does not overlap them', async () => {
    const demo = await cli(['demo', '--dir', dir]);
    expect(demo.code, demo.stderr).toBe(0);
    ui = await startUi([join(dir, 'pipeline.yaml')]);
    await open(`${ui.url}#/p/shop/s/orders`);
    await page.waitForFunction(() => (globalThis as unknown as InPage).document.querySelector('.chart')?.uplot !== undefined);
    const axes = await page.evaluate(() => {
      const w = globalThis as unknown as InPage;
      const u = w.document.querySelector('.chart')!.uplot!;
      const ctx = w.document.createElement('canvas').getContext('2d');
      return u.axes.slice(1).map((a) => {
        ctx.font = a.font[0];
        const widest = Math.max(...(a._values ?? []).map((v) => ctx.measureText(v).width)) / w.devicePixelRatio;
        return { size: a._size, needed: a.ticks.size + a.gap + widest, values: a._values };
      });
    });
    expect(axes).toHaveLength(2);
    for (const a of axes) expect(a.size, JSON.stringify(a.values)).toBeGreaterThanOrEqual(a.needed);
  });

  it('drops a notice when the user moves to another page', async () => {
    const config = await trips();
    ui = await startUi([config, '--allow-actions']);
    await open(`${ui.url}#/p/trips/s/trips`);
    await page.locator('[data-action="run"]').first().click();
    await page.waitForSelector('dialog#confirm[open]');
    await page.click('#confirm-ok');
    await page.waitForSelector('#notice.ok', { timeout: 60_000 });
    expect(await page.locator('#notice').isVisible()).toBe(true);
    await go('#/');
    expect(await page.locator('#notice').isVisible()).toBe(false);
  });
});
