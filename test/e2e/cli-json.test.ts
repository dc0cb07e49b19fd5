/** Every `--json` output speaks snake_case, and `run --json` prints an object on every exit code. */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startCli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';
import { createItems, itemRange, pipelineYaml } from '../helpers/shop.js';

/** Object keys, except those of a state document's `streams` map (stream names are data). */
function keysOf(value: unknown, names = false): string[] {
  if (Array.isArray(value)) return value.flatMap((v) => keysOf(v));
  if (value === null || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([k, v]) => [...(names ? [] : [k]), ...keysOf(v, !names && k === 'streams')]);
}

async function waitForLease(target: string, pipeline: string, pid: number): Promise<void> {
  const fs = await import('node:fs/promises');
  const dir = join(`${target}.locks`, pipeline);
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
    for (const f of await fs.readdir(dir).catch(() => [] as string[])) {
      const lease = JSON.parse(await fs.readFile(join(dir, f), 'utf8').catch(() => '{}')) as { pid?: number; released?: boolean };
      if (f.startsWith('lease-') && lease.pid === pid && lease.released === false) return;
    }
  }
  throw new Error(`process ${pid} never took the lease of ${pipeline}`);
}

describe('--json outputs', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  let config: string;
  let target: string;
  beforeAll(async () => {
    ({ dir, cleanup } = await tempDir());
    const source = join(dir, 'source.sqlite');
    target = join(dir, 'w.duckdb');
    createItems(source, itemRange(1, 3000, 3));
    // The camelCase name of the stream is data and stays as written.
    config = await writeYaml(dir, 'p.yaml', pipelineYaml({ source, destination: { type: 'duckdb', path: target }, stream: { name: 'bigItems', checkpoint_rows: 1000 } }));
    const first = await cli(['run', config, '--json']);
    expect(first.code, first.stderr).toBe(0);
  });
  afterAll(() => cleanup());

  it.each([
    ['runs', () => ['runs', '--config', config, '--json'], ['run_id', 'started_at', 'rows_read', 'rows_loaded', 'cursor_max']],
    ['plan', () => ['plan', config, '--json'], ['resumes_build', 'null_cursor_rows', 'stored_safe_mark']],
    ['state show', () => ['state', 'show', '--config', config, '--json'], ['cursor_column', 'primary_key', 'last_run_id', 'updated_at']],
    ['state history', () => ['state', 'history', '--config', config, '--json'], ['saved_at', 'run_id', 'cursor_column']],
    ['state list', () => ['state', 'list', '--config', config, '--json'], ['last_run_id', 'last_update']],
    ['run', () => ['run', config, '--json'], ['run_id', 'rows_read', 'duration_ms']],
  ])('%s --json has snake_case keys only', async (_what, args, expected) => {
    const out = await cli(args());
    expect(out.code, out.stderr).toBe(0);
    const keys = new Set(keysOf(JSON.parse(out.stdout)));
    for (const key of expected) expect(keys).toContain(key);
    expect([...keys].filter((k) => /[A-Z]/.test(k))).toEqual([]);
    if (_what === 'state show') expect(Object.keys(JSON.parse(out.stdout).streams)).toEqual(['bigItems']);
  });

  it('run --json prints the result on exit 1 (a stream failed)', async () => {
    const bad = await writeYaml(dir, 'missing.yaml', pipelineYaml({ name: 'missing', source: join(dir, 'source.sqlite'), destination: { type: 'duckdb', path: join(dir, 'm.duckdb') }, stream: { table: 'nope' } }));
    const out = await cli(['run', bad, '--json']);
    expect(out.code).toBe(1);
    const result = JSON.parse(out.stdout);
    expect(result).toMatchObject({ pipeline: 'missing', ok: false });
    expect(result.streams[0]).toMatchObject({ stream: 'nope', outcome: 'failed' });
  });

  it('run --json prints an object on exit 2 (a config error)', async () => {
    const bad = await writeYaml(dir, 'typo.yaml', 'name: typo\nsource: {type: sqlite, path: x.db}\nstreams:\n  - table: t\n    cursor_column: c\n');
    const out = await cli(['run', bad, '--json'], { env: { TIDEMARK_CONFIG_CACHE: 'off' } });
    expect(out.code).toBe(2);
    expect(JSON.parse(out.stdout)).toMatchObject({ pipeline: null, file: bad, run_id: null, ok: false, streams: [], error: expect.stringContaining('streams[0].cursor_column: unknown key') });
    expect(out.stderr).toContain('did you mean cursor?');
  });

  it('run --json prints an object on exit 3 (another run holds the pipeline)', async () => {
    const holder = startCli(['run', config], { TIDEMARK_FAILPOINTS: 'lock.after_acquire=1:hang' });
    try {
      await waitForLease(target, 'items', holder.child.pid!);
      const out = await cli(['run', config, '--json']);
      expect(out.code).toBe(3);
      expect(JSON.parse(out.stdout)).toMatchObject({ pipeline: 'items', file: config, ok: false, streams: [], error: expect.stringMatching(/already running/) });
    } finally {
      holder.child.kill('SIGKILL');
      await holder.done;
    }
  });
});
