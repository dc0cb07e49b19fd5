/**
 * The ledger grid of a real partitioned pipeline: statuses come from the same planning a run does (loaded, changed
 * since load, not loaded yet, failed, source missing), the legend says them in those words, `ledger verify` runs,
 * and with --allow-actions a reload goes through `tidemark ledger reload`.
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../../fixtures/taxi.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery } from '../../helpers/warehouse.js';
import { launchBrowser, startUi } from './helpers.js';

let browser: Browser;
let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  browser = await launchBrowser();
  ({ dir, cleanup } = await tempDir('tidemark-ui-ledger-'));
});
afterAll(async () => {
  await browser?.close();
  await cleanup();
});

describe('tidemark ui ledger grid', () => {
  it('shows loaded, changed, not loaded yet, failed and source missing months, verifies, and reloads a month through the library', async () => {
    const data = join(dir, 'data');
    const month = (m: string) => join(data, 'trips', `yellow_tripdata_${m}.parquet`);
    await writeTaxiMonth(month('2024-01'), { year: 2024, month: 1, rows: 300, seed: 1 });
    await writeTaxiMonth(month('2024-02'), { year: 2024, month: 2, rows: 400, seed: 2 });
    const target = join(dir, 'w.duckdb');
    const config = await writeYaml(
      dir,
      'trips.yaml',
      `name: trips\nsource: {type: files, location: ${JSON.stringify(data)}}\nstreams:\n  - name: trips\n    pattern: trips/yellow_tripdata_{month}.parquet\n    partition_column: month\ndestination: {type: duckdb, path: ${JSON.stringify(target)}}\n`,
    );
    await writeTaxiMonth(month('2024-04'), { year: 2024, month: 4, rows: 200, seed: 4 });
    const loaded = await cli(['run', config]);
    expect(loaded.code, loaded.stderr).toBe(0);
    // May arrives cut in half: its load fails.
    await writeTaxiMonth(month('2024-05'), { year: 2024, month: 5, rows: 500, seed: 5 });
    const may = await readFile(month('2024-05'));
    await writeFile(month('2024-05'), may.subarray(0, Math.floor(may.length / 2)));
    const failed = await cli(['run', config]);
    expect(failed.code).toBe(1);
    await writeTaxiMonth(month('2024-02'), { year: 2024, month: 2, rows: 450, seed: 7 });
    await writeTaxiMonth(month('2024-03'), { year: 2024, month: 3, rows: 100, seed: 3 });
    await rm(month('2024-04'));

    const ui = await startUi([config, '--allow-actions']);
    const page: Page = await browser.newPage();
    try {
      await page.goto(`${ui.url}#/p/trips/s/trips`);
      await page.waitForSelector('main[data-ready="true"]');
      await page.waitForSelector('[data-role="ledger"] .cell');
      const status = (p: string) => page.locator(`[data-role="ledger"] .cell[data-partition="${p}"]`).getAttribute('data-status');
      expect(await status('2024-01')).toBe('loaded');
      expect(await status('2024-02')).toBe('changed');
      expect(await status('2024-03')).toBe('not loaded yet');
      expect(await status('2024-04')).toBe('source missing');
      expect(await status('2024-05')).toBe('failed');
      const cell = (p: string) => page.locator(`[data-role="ledger"] .cell[data-partition="${p}"]`);
      expect(await cell('2024-04').getAttribute('class')).toContain('status-source-missing');
      expect(await cell('2024-04').getAttribute('title')).toContain('rows: 200');
      expect(await cell('2024-05').getAttribute('class')).toContain('status-failed');
      expect(await cell('2024-05').getAttribute('title')).toMatch(/last load failed at \S+ \(run \S+\): .*yellow_tripdata_2024-05\.parquet/);
      // The legend says what each colour means, one word set per status, with its count.
      expect(await page.locator('[data-role="ledger"] .legend .legend-item').allTextContents()).toEqual([
        'loaded: 1',
        'changed since load: 1',
        'not loaded yet: 1',
        'failed: 1',
        'source missing: 1',
      ]);
      await page.waitForFunction(() => !((globalThis as unknown as { document: { querySelector(s: string): { textContent: string | null } | null } }).document.querySelector('[data-role="verify"]')?.textContent ?? '').includes('Checking'));
      expect(await page.locator('[data-role="verify"]').textContent()).not.toContain('Not available');
      // The plan panel: what the next run would do with each month, from the same planning.
      await page.waitForSelector('[data-role="plan"] [data-role="partition-plan"]');
      const plan = (await page.locator('[data-role="plan"] [data-role="partition-plan"]').textContent()) ?? '';
      expect(plan).toContain('3 partitions to load, 1 unchanged');
      expect(plan).toMatch(/reload\s*2024-02\s*changed/);
      expect(plan).toMatch(/load\s*2024-03\s*new/);
      expect(plan).toMatch(/keep\s*2024-04\s*source missing/);

      await page.locator('[data-role="ledger"] .cell[data-partition="2024-02"]').click();
      await page.locator('[data-role="partition-menu"] [data-action="ledger-reload"]').click();
      await page.waitForSelector('dialog#confirm[open]');
      expect(await page.locator('#confirm-text').textContent()).toContain('tidemark ledger reload 2024-02');
      await page.click('#confirm-ok');
      await page.waitForSelector('#notice.ok', { timeout: 60_000 });
      expect(await page.locator('#notice').textContent()).toContain('2024-02: reloaded');
    } finally {
      await page.close();
      await ui.stop();
    }
    const counts = await duckdbQuery(target, `SELECT month, count(*) AS n FROM trips GROUP BY month ORDER BY month`);
    expect(counts.map((r) => [r.month, Number(r.n)])).toEqual([
      ['2024-01', 300],
      ['2024-02', 450],
      ['2024-04', 200],
    ]);
  }, 120_000);
});
