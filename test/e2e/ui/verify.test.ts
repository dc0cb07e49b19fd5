/**
 * The dashboard shows each stream's last verify as a badge beside its name, in Chromium: none before any verify,
 * "verified" after a clean one, "drift" after one that found differences (a row deleted in the source).
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../../helpers/shop.js';
import { launchBrowser, startUi } from './helpers.js';

let browser: Browser;
let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => {
  browser = await launchBrowser();
  ({ dir: root, cleanup } = await tempDir());
});
afterAll(async () => {
  await browser?.close();
  await cleanup();
});

async function badge(config: string): Promise<{ status: string | null; text: string } | null> {
  const ui = await startUi([config]);
  const page = await browser.newPage();
  try {
    await page.goto(ui.url);
    await page.waitForSelector('main[data-ready="true"]');
    const el = await page.$('tr[data-stream="items"] [data-role="verify"]');
    if (el === null) return null;
    return { status: await el.getAttribute('data-status'), text: (await el.textContent()) ?? '' };
  } finally {
    await page.close();
    await ui.stop();
  }
}

describe('the dashboard shows the last verify', () => {
  it('no badge before a verify, verified after a clean one, drift after one with differences', async () => {
    const source = join(root, 's.sqlite');
    createItems(source, itemRange(1, 700, 4));
    const config = await writeYaml(root, 'p.yaml', pipelineYaml({ source, destination: { type: 'duckdb', path: join(root, 'w.duckdb') }, stream: { write: 'merge', checkpoint_rows: 200, batch_rows: 60 } }));
    expect((await cli(['run', config])).code).toBe(0);
    expect(await badge(config)).toBeNull();
    expect((await cli(['verify', config])).code).toBe(0);
    expect(await badge(config)).toEqual({ status: 'equal', text: 'verified' });
    const db = new Database(source);
    db.prepare('DELETE FROM items WHERE id = 650').run();
    db.close();
    expect((await cli(['verify', config])).code).toBe(1);
    expect(await badge(config)).toEqual({ status: 'drift', text: 'drift' });
  }, 120_000);
});
