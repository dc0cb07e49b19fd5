/**
 * `notify:` webhooks against local HTTP receivers: a failure is told once however many runs fail, a recovery once,
 * a stale stream once; the Slack format carries `text`; a receiver that fails first still gets the notice (retried
 * with backoff); a receiver that never answers does not hold up the commit. 6,000 rows committed every 2,000.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../helpers/shop.js';
import { sqliteQuery } from '../helpers/warehouse.js';

interface Receiver {
  readonly url: string;
  readonly bodies: unknown[];
  /** Requests answered with an error before the first success. */
  failures: number;
  close(): Promise<void>;
}

/** Answers 503 to the first `failFirst` requests, then 200; records the bodies it accepted. */
async function receiver(failFirst = 0, hang = false): Promise<Receiver> {
  const r = { bodies: [] as unknown[], failures: 0 };
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      if (hang) return;
      if (r.failures < failFirst) {
        r.failures += 1;
        res.writeHead(503);
        return res.end();
      }
      r.bodies.push(JSON.parse(body));
      res.writeHead(200);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(r, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

let dir: string;
let cleanup: () => Promise<void>;
const receivers: Receiver[] = [];
beforeAll(async () => ({ dir, cleanup } = await tempDir('tidemark-notify-')));
afterAll(async () => {
  for (const r of receivers) await r.close();
  await cleanup();
});

async function setup(label: string, notify: string, stream: Record<string, unknown> = {}) {
  const source = join(dir, `${label}.sqlite`);
  const target = join(dir, `${label}-warehouse.sqlite`);
  createItems(source, itemRange(1, 6000, 3));
  const config = await writeYaml(dir, `${label}.yaml`, pipelineYaml({ name: label, source, destination: { type: 'sqlite', path: target }, stream: { checkpoint_rows: 2000, ...stream }, extra: notify }));
  return { source, target, config };
}

describe('notify', () => {
  it('tells a failure once across failing runs, then the recovery once, in JSON and Slack format', async () => {
    const json = await receiver();
    const slack = await receiver();
    receivers.push(json, slack);
    const { source, config } = await setup('shop', `notify:\n  - webhook: ${json.url}\n  - webhook: ${slack.url}\n    format: slack\n    on: [failure, recovery]\n`);
    const failing = { TIDEMARK_FAILPOINTS: 'load.after_write=2:throw' };
    for (let i = 0; i < 2; i += 1) expect((await cli(['run', config], { env: failing })).code).toBe(1);
    expect(json.bodies).toEqual([expect.objectContaining({ event: 'failure', pipeline: 'shop', stream: 'items', error_kind: expect.any(String), message: expect.stringContaining('failpoint') })]);
    expect(slack.bodies).toEqual([{ text: expect.stringMatching(/^tidemark failure: shop\.items failed: .*failpoint/) }]);
    createItems(source, itemRange(6001, 100, 3, 100_000));
    expect((await cli(['run', config])).code).toBe(0);
    expect((await cli(['run', config])).code).toBe(0);
    expect(json.bodies.map((b) => (b as { event: string }).event)).toEqual(['failure', 'recovery']);
    expect(slack.bodies.map((b) => (b as { text: string }).text)).toEqual([expect.stringContaining('failure'), 'tidemark recovery: shop.items succeeded again']);
  }, 120_000);

  it('tells a stream that passed its freshness limit once, and only to webhooks that take stale', async () => {
    const stale = await receiver();
    const failuresOnly = await receiver();
    receivers.push(stale, failuresOnly);
    const { config } = await setup('fresh', `notify:\n  - webhook: ${stale.url}\n    on: [stale]\n  - webhook: ${failuresOnly.url}\n    on: [failure]\n`, { freshness: '6h' });
    expect((await cli(['run', config])).code).toBe(0);
    expect((await cli(['run', config])).code).toBe(0);
    // The rows are from January 2024: the newest is far older than 6 h, on the loading run and the no-op one alike.
    expect(stale.bodies).toEqual([expect.objectContaining({ event: 'stale', pipeline: 'fresh', stream: 'items', message: expect.stringMatching(/^fresh\.items is stale: its newest row is \d+ d old \(freshness: 6 h\)$/) })]);
    expect(failuresOnly.bodies).toEqual([]);
  }, 120_000);

  it('retries a receiver that fails first, and delivers', async () => {
    const flaky = await receiver(2);
    receivers.push(flaky);
    const { config } = await setup('flaky', `notify:\n  - webhook: ${flaky.url}\n`);
    expect((await cli(['run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_write=1:throw' } })).code).toBe(1);
    expect(flaky.failures).toBe(2);
    expect(flaky.bodies).toEqual([expect.objectContaining({ event: 'failure', stream: 'items' })]);
  }, 120_000);

  it('never holds up a commit: with a receiver that does not answer, the rows are committed and the run ends', async () => {
    const silent = await receiver(0, true);
    receivers.push(silent);
    const { source, target, config } = await setup('silent', `notify:\n  - webhook: ${silent.url}\n`, { batch_rows: 500 });
    // A first load builds its table beside and swaps it in at the end: the second, incremental one commits in place.
    expect((await cli(['run', config])).code).toBe(0);
    createItems(source, itemRange(6001, 6000, 3, 100_000));
    const out = await cli(['run', config, '--json'], { env: { TIDEMARK_FAILPOINTS: 'load.after_write=6:throw' } });
    expect(out.code, out.stderr).toBe(1);
    // The checkpoints before the failure were committed, whatever became of the notice.
    const committed = (JSON.parse(out.stdout) as { streams: { rows_loaded: number }[] }).streams[0]!.rows_loaded;
    expect(committed).toBeGreaterThanOrEqual(2000);
    expect(Number(sqliteQuery(target, 'SELECT COUNT(*) AS n FROM items')[0]!.n)).toBe(6000 + committed);
    expect(out.stderr).toMatch(/notify failure not delivered/);
  }, 120_000);
});
