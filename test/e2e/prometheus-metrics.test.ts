/**
 * Prometheus `/metrics` on the long-running commands: `ui` (always), `worker` and `schedule` (`--metrics-port`). Each
 * is scraped after it ran a pipeline of 6,000 rows committed every 2,000: the text exposition format, with the run's
 * figures.
 */
import { join } from 'node:path';
import { mkdir } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../helpers/shop.js';
import { openQueue, queueArgs, uniqueQueueName, waitFor } from '../integration/queue/queue-fixture.js';
import { startUi } from './ui/helpers.js';

const ROWS = 6000;
let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-prometheus-')));
afterAll(() => cleanup());

async function pipeline(label: string, extra = ''): Promise<string> {
  const dir = join(root, label);
  await mkdir(dir, { recursive: true });
  createItems(join(dir, 'source.sqlite'), itemRange(1, ROWS, 3));
  return writeYaml(dir, 'items.yaml', pipelineYaml({ source: join(dir, 'source.sqlite'), destination: { type: 'sqlite', path: join(dir, 'warehouse.sqlite') }, stream: { checkpoint_rows: 2000 }, extra }));
}

async function scrape(url: string): Promise<{ type: string; text: string }> {
  const response = await fetch(url);
  expect(response.status).toBe(200);
  return { type: response.headers.get('content-type') ?? '', text: await response.text() };
}

/** The value of one sample line, e.g. `tidemark_rows_loaded_total{pipeline="items",stream="items"} 6000`. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-z_:]+)\{([^}]*)\} (\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const has = Object.fromEntries([...m[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    if (Object.entries(labels).every(([k, v]) => has[k] === v)) return Number(m[3]);
  }
  return undefined;
}

/** `runs`: how many runs finished by the scrape (a scheduler ticking every second may have run again, reading nothing new). */
function expectRunFigures(text: string, runs: 'one' | 'some' = 'one'): void {
  const items = { pipeline: 'items', stream: 'items' };
  expect(text).toMatch(/^# TYPE tidemark_rows_loaded_total counter$/m);
  expect(sample(text, 'tidemark_rows_read_total', items), text).toBe(ROWS);
  expect(sample(text, 'tidemark_rows_loaded_total', items)).toBe(ROWS);
  expect(sample(text, 'tidemark_rows_rejected_total', items)).toBe(0);
  const commits = sample(text, 'tidemark_commits_total', items)!;
  expect(commits).toBeGreaterThanOrEqual(3);
  expect(sample(text, 'tidemark_commit_duration_seconds_count', items)).toBe(commits);
  const finished = sample(text, 'tidemark_run_duration_seconds_count', { pipeline: 'items', outcome: 'committed' });
  if (runs === 'one') expect(finished).toBe(1);
  else expect(finished).toBeGreaterThanOrEqual(1);
  expect(sample(text, 'tidemark_freshness_seconds', items)).toBeGreaterThan(3600 * 24 * 300);
}

describe('Prometheus /metrics', () => {
  it('tidemark ui serves the runs it starts', async () => {
    const config = await pipeline('ui');
    const ui = await startUi([config, '--allow-actions']);
    try {
      const before = await scrape(`${ui.url}metrics`);
      expect(before.type).toMatch(/^text\/plain/);
      expect(sample(before.text, 'tidemark_rows_loaded_total', { pipeline: 'items' })).toBeUndefined();
      const page = await (await fetch(ui.url)).text();
      const token = /name="tidemark-token" content="([0-9a-f]+)"/.exec(page)![1]!;
      const run = await fetch(`${ui.url}api/pipelines/items/run`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-tidemark-token': token }, body: '{}' });
      expect(run.status, await run.clone().text()).toBe(200);
      expectRunFigures((await scrape(`${ui.url}metrics`)).text);
    } finally {
      await ui.stop();
    }
  }, 120_000);

  it('tidemark worker --metrics-port serves the jobs it ran', async () => {
    const config = await pipeline('worker');
    const name = uniqueQueueName('prom');
    const queue = openQueue(name);
    const worker = startCli(['worker', ...queueArgs(name), '--metrics-port', '0'], { TIDEMARK_LOG_LEVEL: 'info' });
    try {
      await waitFor('the worker', () => /metrics at http/.test(worker.output().stdout), 30_000);
      const url = /metrics at (http:\/\/\S+)/.exec(worker.output().stdout)![1]!;
      const enqueued = await cli(['enqueue', config, ...queueArgs(name)]);
      expect(enqueued.code, enqueued.stderr).toBe(0);
      await waitFor('the job', async () => sample((await scrape(url)).text, 'tidemark_run_duration_seconds_count', { pipeline: 'items' }) !== undefined, 60_000).catch((e: unknown) => {
        throw new Error(`${String(e)}\n${worker.output().stderr}`);
      });
      const { type, text } = await scrape(url);
      expect(type).toMatch(/^text\/plain/);
      expectRunFigures(text);
      expect((await fetch(url.replace('/metrics', '/other'))).status).toBe(404);
    } finally {
      worker.child.kill('SIGTERM');
      expect((await worker.done).code, worker.output().stderr).toBe(0);
      await queue.close();
    }
  }, 120_000);

  it('tidemark schedule --metrics-port serves the runs of its ticks', async () => {
    const config = await pipeline('schedule', 'schedule: "* * * * * *"\n');
    const s = startCli(['schedule', config, '--metrics-port', '0', '--state-file', join(root, 'ticks.json')], { TIDEMARK_LOG_LEVEL: 'info' });
    try {
      await waitFor('the scheduler', () => /metrics at http/.test(s.output().stdout), 30_000);
      const url = /metrics at (http:\/\/\S+)/.exec(s.output().stdout)![1]!;
      await waitFor('a committed tick', () => /committed, 6000 rows loaded/.test(s.output().stderr), 60_000);
      expectRunFigures((await scrape(url)).text, 'some');
    } finally {
      s.child.kill('SIGTERM');
      expect((await s.done).code, s.output().stderr).toBe(0);
    }
  }, 120_000);

  it('refuses a --metrics-port that is no port', async () => {
    const out = await cli(['worker', '--queue', 'redis://127.0.0.1:6379', '--metrics-port', 'abc']);
    expect(out.code).toBe(2);
    expect(out.stderr).toContain('--metrics-port: expected 0…65535, got abc');
  });
});
