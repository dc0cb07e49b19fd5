/**
 * Pipelines made in code: checked by the pipeline schema and rules, accepted by run, planPipeline and stateCommands,
 * state keyed by pipeline and stream name; pipeline modules and `source: {type: code, module}` files loaded by
 * loadPipeline, run by the CLI, and run by a queue worker that imports the module itself.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codeSource, ConfigError, definePipeline, defineStream, InProcessDispatcher, loadPipeline, planPipeline, readTable, run, Scheduler, stateCommands, TickStore, type TableRow } from '../../../src/index.js';
import { silentLogger } from '../../../src/core/logger.js';
import { cli } from '../../helpers/cli.js';
import { tempDir } from '../../helpers/fs.js';
import { openQueue, queueArgs, startWorker, stopAll, uniqueQueueName, waitFor, type Started } from '../queue/queue-fixture.js';

const LIBRARY = new URL('../../../dist/index.js', import.meta.url).href;

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-code-pipeline-')));
afterAll(() => cleanup());

/** A stream of the numbers 1…`upTo()`, read from the watermark on; `reads` counts its calls. */
function numbers(upTo: () => number, reads: { since: unknown[] }) {
  return defineStream({
    name: 'numbers',
    primaryKey: 'n',
    cursor: 'n',
    columns: { n: 'int64', label: 'text' },
    ordered: true,
    async *read(ctx) {
      reads.since.push(ctx.since);
      for (let n = Number(ctx.since ?? 0n) + 1; n <= upTo(); n += 1) yield { n: BigInt(n), label: `#${n}` };
    },
  });
}

async function all(rows: AsyncIterable<TableRow>): Promise<TableRow[]> {
  const out: TableRow[] = [];
  for await (const row of rows) out.push(row);
  return out;
}

describe('definePipeline', () => {
  const source = codeSource({ streams: [numbers(() => 10, { since: [] })] });

  it('checks the object with the pipeline schema and its rules, naming the key', () => {
    const bad = [
      [{ name: 'p', source, streams: [{ name: 'numbers', write: 'upsert' }] }, /streams\[0\]\.write/],
      [{ name: 'p', source, streams: [{ name: 'nope' }] }, /streams\[0\]\.name: the code source has no stream "nope"/],
      [{ name: 'p', source, streams: [{ name: 'numbers', cursor: 'label' }] }, /cursor of stream numbers is declared by its definition/],
      [{ name: 'p', source, streams: [{ name: 'numbers', write: 'append', lookback: '5m' }] }, /lookback re-reads rows, so it needs write: merge/],
      [{ name: 'p q', source }, /name/],
      [{ name: 'p', source, destinaton: { type: 'duckdb' } }, /destinaton/],
    ] as const;
    for (const [input, message] of bad) expect(() => definePipeline(input as never), String(message)).toThrow(message);
    expect(() => definePipeline({ name: 'p', source, streams: [{ name: 'numbers', write: 'upsert' as 'merge' }] })).toThrow(ConfigError);
  });

  it('defaults like a file: every stream of the source, merge on the key, the DuckDB destination', () => {
    const pipeline = definePipeline({ name: 'p', source });
    expect(pipeline.streams.map((s) => [s.name, s.strategy, s.write, s.primaryKey, s.cursor])).toEqual([['numbers', 'incremental', 'merge', ['n'], 'n']]);
    expect(pipeline.destination).toMatchObject({ type: 'duckdb' });
  });
});

describe('a pipeline in code', () => {
  it('runs, plans and edits state by pipeline and stream name, whatever the function is called', async () => {
    const dir = join(root, 'state');
    const destination = { type: 'sqlite', path: join(dir, 'w.sqlite') } as const;
    let upTo = 120;
    const reads = { since: [] as unknown[] };
    const first = definePipeline({ name: 'counting', source: codeSource({ streams: [numbers(() => upTo, reads)] }), destination, streams: [{ name: 'numbers', checkpoint_rows: 25 }] });
    const r1 = (await run(first)).streams[0]!;
    expect(r1).toMatchObject({ outcome: 'committed', rowsRead: 120, commits: 5 });
    // Another definition object (a renamed function, a new module) with the same names continues the same state.
    const renamed = { since: [] as unknown[] };
    const again = definePipeline({ name: 'counting', source: codeSource({ streams: [numbers(() => upTo, renamed)] }), destination });
    const [plan] = await planPipeline(again);
    expect(plan).toMatchObject({ stream: 'numbers', mode: 'incremental' });
    expect(plan!.predicate).toContain('since 120');
    upTo = 130;
    const r2 = (await run(again)).streams[0]!;
    expect(renamed.since).toEqual([120n]);
    expect(r2.rowsRead).toBe(10);
    const state = stateCommands(again);
    expect((await state.show()).streams.numbers?.watermark?.cursor.value).toBe('130');
    await state.reset('numbers');
    await run(again);
    expect(renamed.since.at(-1)).toBeUndefined();
    const rows = await all(readTable(again, 'numbers', { orderBy: ['n'] }));
    expect(rows).toHaveLength(130);
    expect(rows[129]).toEqual({ n: 130n, label: '#130' });
  });
});

describe('the scheduler', () => {
  it('runs a pipeline made in code on its schedule, in process', async () => {
    const dir = join(root, 'scheduled');
    await mkdir(dir, { recursive: true });
    const reads = { since: [] as unknown[] };
    const pipeline = definePipeline({
      name: 'scheduled',
      source: codeSource({ streams: [numbers(() => 30, reads)] }),
      destination: { type: 'sqlite', path: join(dir, 'w.sqlite') },
      schedule: '*/5 * * * *',
      timezone: 'UTC',
    });
    const ticks = await TickStore.open(join(dir, 'ticks.json'));
    await ticks.record('scheduled', new Date(Date.now() - 3_600_000));
    const scheduler = new Scheduler([pipeline], { dispatcher: new InProcessDispatcher(silentLogger), ticks, logger: silentLogger });
    const [tick] = await scheduler.once();
    expect(tick).toMatchObject({ pipeline: 'scheduled', outcome: 'committed' });
    expect(await all(readTable(pipeline, 'numbers'))).toHaveLength(30);
  });
});

describe('pipeline modules', () => {
  const MODULE = `import { codeSource, defineStream, definePipeline } from ${JSON.stringify(LIBRARY)};
export const source = codeSource({ streams: [defineStream({
  name: 'numbers', primaryKey: 'n', cursor: 'n', columns: { n: 'int64' }, ordered: true,
  async *read(ctx) { for (let n = Number(ctx.since ?? 0n) + 1; n <= Number(process.env.UP_TO ?? 40); n += 1) yield { n }; },
})] });
export default definePipeline({ name: 'from-module', source, destination: { type: 'sqlite', path: './w.sqlite' }, streams: [{ name: 'numbers', checkpoint_rows: 10 }] }, { module: import.meta.url });
`;

  it('loadPipeline imports a .mjs pipeline (paths from its directory), and a YAML file names a code source module', async () => {
    const dir = join(root, 'modules');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'pipeline.mjs'), MODULE);
    const pipeline = await loadPipeline(join(dir, 'pipeline.mjs'));
    expect(pipeline).toMatchObject({ name: 'from-module', file: join(dir, 'pipeline.mjs'), destination: { type: 'sqlite', path: join(dir, 'w.sqlite') } });
    expect((await run(pipeline)).streams[0]).toMatchObject({ rowsRead: 40, commits: 4 });
    await writeFile(join(dir, 'yaml.yaml'), 'name: from-yaml\nsource: { type: code, module: ./pipeline.mjs, export: source }\nstreams: [{ name: numbers, write: append }]\ndestination: { type: sqlite, path: ./y.sqlite }\n');
    const fromYaml = await loadPipeline(join(dir, 'yaml.yaml'));
    expect(fromYaml.streams[0]).toMatchObject({ name: 'numbers', cursor: 'n', primaryKey: ['n'], write: 'append' });
    expect((await run(fromYaml)).streams[0]!.rowsRead).toBe(40);
    await writeFile(join(dir, 'wrong.yaml'), 'name: wrong\nsource: { type: code, module: ./pipeline.mjs, export: nope }\nstreams: [{ name: numbers }]\n');
    await expect(loadPipeline(join(dir, 'wrong.yaml'))).rejects.toThrow(/source.export: .*has no export nope/);
  });

  it('the CLI runs a pipeline module, and a queue worker imports it to run its job', async () => {
    const dir = join(root, 'cli');
    await mkdir(dir, { recursive: true });
    const file = join(dir, 'pipeline.mjs');
    await writeFile(file, MODULE);
    const first = await cli(['run', file, '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout).streams[0]).toMatchObject({ stream: 'numbers', rows_read: 40 });
    const name = uniqueQueueName('code');
    const { queue, close } = openQueue(name);
    const workers: Started[] = [];
    try {
      const enqueued = await cli(['enqueue', file, ...queueArgs(name)]);
      expect(enqueued.code, enqueued.stderr).toBe(0);
      workers.push(startWorker(name, 'w', { UP_TO: '75' }));
      await waitFor('the job to complete', async () => (await queue.getJobCounts('completed')).completed === 1);
      const pipeline = await loadPipeline(file);
      const rows = await all(readTable(pipeline, 'numbers', { orderBy: ['n'] }));
      expect(rows.map((r) => r.n)).toEqual(Array.from({ length: 75 }, (_, i) => BigInt(i + 1)));
    } finally {
      await stopAll(workers);
      await close();
    }
  }, 60_000);
});
