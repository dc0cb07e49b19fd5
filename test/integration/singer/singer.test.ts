import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BIN, cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { duckdbQuery, sqliteQuery } from '../../helpers/warehouse.js';

const TAPS = fileURLToPath(new URL('./taps/', import.meta.url));
const NODE_TAP = join(TAPS, 'tap-numbers.mjs');
const PY_TAP = join(TAPS, 'tap_words.py');
const SECRET = 'tap-pass-93817';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

const env = { TAP_PASSWORD: SECRET };

function numbersPipeline(tapConfig: string, destination: string): string {
  return `name: nums
source:
  type: singer
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(NODE_TAP)}]
  config: ${tapConfig}
streams:
  - name: numbers
    primary_key: id
    write: append
    checkpoint_rows: 5
destination:
  type: sqlite
  path: ${JSON.stringify(destination)}
`;
}

async function run(config: string) {
  const out = await cli(['run', config, '--json'], { env });
  return { ...out, result: out.stdout ? JSON.parse(out.stdout) : undefined };
}

describe('singer source', () => {
  it("merges on the tap's key_properties when no primary_key is configured: a tap that resends its bookmark's record adds no duplicate", async () => {
    const target = join(dir, 'w.sqlite');
    const yaml = (count: number) => numbersPipeline(`{count: ${count}, inclusive: true}`, target).replace('    primary_key: id\n    write: append\n', '');
    const config = await writeYaml(dir, 'p.yaml', yaml(10));
    // `plan` stops the tap after its SCHEMA; its unread output once kept the child from closing, and with nothing
    // else pending Node ended the process silently with exit code 0 (most of the time).
    for (let i = 0; i < 4; i += 1) {
      const plan = await cli(['plan', config, '--json'], { env });
      expect(plan.code, plan.stderr).toBe(0);
      expect(JSON.parse(plan.stdout)[0].write, plan.stderr).toBe('merge');
    }
    expect((await run(config)).result.streams[0].rows_loaded).toBe(10);
    await writeYaml(dir, 'p.yaml', yaml(12));
    // The tap sends 10 again (its bookmark), 11 and 12: the engine drops 10, which is committed.
    expect((await run(config)).result.streams[0]).toMatchObject({ rows_loaded: 2, rows_resent: 1 });
    const ids = sqliteQuery(target, 'SELECT id FROM numbers ORDER BY id').map((r) => Number(r.id));
    expect(ids).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
  });

  it('runs a Node tap with its bookmarks, exact values, no duplicates, and round-trips the tap state', async () => {
    const target = join(dir, 'w.sqlite');
    const config = await writeYaml(dir, 'p.yaml', numbersPipeline(`{count: 25, password: "\${env:TAP_PASSWORD}"}`, target));
    const first = await run(config);
    expect(first.code, first.stderr).toBe(0);
    expect(first.result.streams[0]).toMatchObject({ rows_loaded: 25, rows_rejected: 0 });
    const rows = sqliteQuery(target, 'SELECT id, big, price, tags FROM numbers ORDER BY id');
    expect(rows[2]).toMatchObject({ id: 3n, big: 9007199254740993n, price: '0.100000000000000000003', tags: '["a",3]' });

    const exported = await cli(['state', 'export', '--config', config], { env });
    expect(exported.code, exported.stderr).toBe(0);
    const tapState = { bookmarks: { numbers: { last_id: 25 }, letters: { seen: 25 } }, currently_syncing: null };
    expect(JSON.parse(exported.stdout)).toEqual(tapState);

    // The tap continues from its bookmark: only the 5 new records, and none twice (write: append).
    await writeYaml(dir, 'p.yaml', numbersPipeline(`{count: 30, password: "\${env:TAP_PASSWORD}"}`, target));
    const second = await run(config);
    expect(second.code, second.stderr).toBe(0);
    expect(second.result.streams[0].rows_loaded).toBe(5);
    expect(sqliteQuery(target, 'SELECT count(*) AS n, count(DISTINCT id) AS d FROM numbers')[0]).toEqual({ n: 30n, d: 30n });

    // Import then export gives back the document unchanged, and the tap starts from it.
    const custom = { bookmarks: { numbers: { last_id: 28 }, letters: { seen: 1 } }, currently_syncing: 'numbers', extra: { big: 12345678901234567 } };
    await writeFile(join(dir, 'state.json'), JSON.stringify(custom));
    expect((await cli(['state', 'import', join(dir, 'state.json'), '--config', config], { env })).code).toBe(0);
    expect(JSON.parse((await cli(['state', 'export', '--config', config], { env })).stdout)).toEqual(custom);
    expect(JSON.stringify(JSON.parse((await cli(['state', 'show', '--json', '--config', config], { env })).stdout))).not.toContain(SECRET);
  });

  it('a tap that crashes before a STATE tidemark can read commits nothing of the run, shows its stderr, and the next run finishes exactly', async () => {
    const target = join(dir, 'w.sqlite');
    const config = await writeYaml(dir, 'p.yaml', numbersPipeline(`{count: 40, crash_after: 27, password: "\${env:TAP_PASSWORD}"}`, target));
    const crashed = await run(config);
    expect(crashed.code).toBe(1);
    const error = crashed.result.streams[0].error as string;
    expect(error).toMatch(/exited with code 3/);
    expect(error).toContain('simulated failure after 27 records');
    expect(crashed.stdout + crashed.stderr).not.toContain(SECRET);
    // The tap's STATE names its bookmark `last_id`, a form tidemark cannot read, so no STATE of it could be shown safe
    // to resume from: an append stream commits such a tap's records only once the tap has ended successfully.
    expect(sqliteQuery(target, `SELECT count(*) AS n FROM sqlite_master WHERE name = 'numbers'`)[0]).toEqual({ n: 0n });
    expect((await cli(['state', 'export', '--config', config], { env })).stdout.trim()).not.toContain('last_id');

    await writeYaml(dir, 'p.yaml', numbersPipeline(`{count: 40, password: "\${env:TAP_PASSWORD}"}`, target));
    const again = await run(config);
    expect(again.code, again.stderr).toBe(0);
    expect(sqliteQuery(target, 'SELECT count(*) AS n, count(DISTINCT id) AS d FROM numbers')[0]).toEqual({ n: 40n, d: 40n });
  });

  it('runs a Python tap into DuckDB with an inline config written to a private temp file', async () => {
    const target = join(dir, 'w.duckdb');
    const yaml = (words: string[]) => `name: words
source:
  type: singer
  command: python3 ${PY_TAP}
  config: {words: ${JSON.stringify(words)}}
streams:
  - name: words
    primary_key: position
destination:
  type: duckdb
  path: ${JSON.stringify(target)}
`;
    const config = await writeYaml(dir, 'p.yaml', yaml(['tide', 'mark', 'sea']));
    const first = await run(config);
    expect(first.code, first.stderr).toBe(0);
    await writeYaml(dir, 'p.yaml', yaml(['tide', 'mark', 'sea', 'shore', 'line']));
    const second = await run(config);
    expect(second.code, second.stderr).toBe(0);
    expect(second.result.streams[0].rows_loaded).toBe(2);
    const rows = await duckdbQuery(target, 'SELECT position, word, length FROM words ORDER BY position');
    expect(rows.map((r) => r.word)).toEqual(['tide', 'mark', 'sea', 'shore', 'line']);
    expect(JSON.parse((await cli(['state', 'export', '--config', config])).stdout)).toEqual({ bookmarks: { words: { position: 5 } } });
  });
});

describe('tidemark target', () => {
  it('loads a tap piped on stdin and prints each STATE only after it is committed', async () => {
    const target = join(dir, 'w.sqlite');
    const tapConfig = join(dir, 'tap.json');
    await writeFile(tapConfig, JSON.stringify({ count: 30, state_every: 10 }));
    const config = await writeYaml(dir, 't.yaml', `name: sink
streams:
  - name: numbers
    checkpoint_rows: 10
destination:
  type: sqlite
  path: ${JSON.stringify(target)}
`);
    const tap = spawn(process.execPath, [NODE_TAP, '--config', tapConfig], { stdio: ['ignore', 'pipe', 'ignore'] });
    const sink = spawn(process.execPath, [BIN, 'target', '--config', config], { stdio: ['pipe', 'pipe', 'pipe'] });
    tap.stdout.pipe(sink.stdin);
    const states: string[] = [];
    const counts: bigint[] = [];
    let stderr = '';
    sink.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    let buffered = '';
    sink.stdout.on('data', (d: Buffer) => {
      buffered += d.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      states.push(...lines);
    });
    const code = await new Promise<number | null>((resolve) => sink.on('close', resolve));
    expect(code, stderr).toBe(0);
    expect(states.length).toBeGreaterThanOrEqual(2);
    expect(JSON.parse(states.at(-1)!)).toEqual({ bookmarks: { numbers: { last_id: 30 }, letters: { seen: 30 } }, currently_syncing: null });
    counts.push(...sqliteQuery(target, 'SELECT count(*) AS n FROM numbers').map((r) => r.n as bigint));
    expect(counts).toEqual([30n]);
    // Streams without settings are created from their SCHEMA (key_properties → merge).
    expect(sqliteQuery(target, 'SELECT count(*) AS n FROM letters')[0]).toEqual({ n: 4n });
    // Emitted states are what tidemark stored.
    const exported = await cli(['state', 'export', '--config', config]);
    expect(JSON.parse(exported.stdout)).toEqual(JSON.parse(states.at(-1)!));
  });

  it('a broken message stops the target without printing states it has not committed', async () => {
    const target = join(dir, 'w.sqlite');
    const config = await writeYaml(dir, 't.yaml', `name: sink\ndestination:\n  type: sqlite\n  path: ${JSON.stringify(target)}\n`);
    const input = [
      '{"type":"SCHEMA","stream":"s","schema":{"properties":{"id":{"type":"integer"}}},"key_properties":["id"]}',
      '{"type":"RECORD","stream":"s","record":{"id":1}}',
      '{"type":"STATE","value":{"bookmarks":{"s":1}}}',
      '{"type":"RECORD","stream":"s","record":{"id":',
    ].join('\n');
    const out = await cli(['target', '--config', config], { input });
    expect(out.code).toBe(1);
    expect(out.stdout).toBe('');
    expect(out.stderr).toMatch(/line 4 is not a JSON Singer message/);
  });
});
