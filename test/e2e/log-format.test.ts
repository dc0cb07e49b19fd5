/**
 * `--log-format json` / TIDEMARK_LOG_FORMAT=json: stderr holds one JSON object a line (warnings, progress, a failed
 * stream's error, the error a command ends with), with the pipeline, stream, run id, phase and error kind as fields.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeTaxiMonth } from '../fixtures/taxi.js';
import { cli } from '../helpers/cli.js';
import { tempDir, writeYaml } from '../helpers/fs.js';

let dir: string;
let cleanup: () => Promise<void>;
let config: string;
beforeAll(async () => {
  ({ dir, cleanup } = await tempDir('tidemark-log-format-'));
  await mkdir(join(dir, 'trips'), { recursive: true });
  for (const m of [1, 2, 3]) await writeTaxiMonth(join(dir, 'trips', `yellow_tripdata_2024-0${m}.parquet`), { year: 2024, month: m, rows: 2000, seed: m });
  // The second stream's pattern matches nothing: a warning naming pipeline and stream.
  config = await writeYaml(
    dir,
    'trips.yaml',
    `name: trips
source: { type: files, location: ${JSON.stringify(dir)} }
streams:
  - name: trips
    pattern: trips/yellow_tripdata_{month}.parquet
    partition_column: month
  - name: ghosts
    pattern: ghosts/g_{month}.parquet
    partition_column: month
destination: { type: sqlite, path: ${JSON.stringify(join(dir, 'warehouse.sqlite'))} }
`,
  );
});
afterAll(async () => cleanup());

type Line = Record<string, unknown>;
/** Every stderr line parsed: JSON.parse throws on a line that is not one object. */
function objects(stderr: string): Line[] {
  return stderr
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Line);
}

describe('--log-format json', () => {
  it('prints a failed stream as one error object with pipeline, stream, run id, phase and error kind', async () => {
    const out = await cli(['--log-format', 'json', 'run', config], { env: { TIDEMARK_FAILPOINTS: 'load.after_write=2:throw' } });
    expect(out.code, out.stderr).toBe(1);
    const lines = objects(out.stderr);
    for (const l of lines) expect(Date.parse(String(l.time)), JSON.stringify(l)).not.toBeNaN();
    const errors = lines.filter((l) => l.level === 'error');
    expect(errors, out.stderr).toEqual([
      expect.objectContaining({ pipeline: 'trips', stream: 'trips', phase: expect.any(String), error_kind: expect.any(String), run_id: expect.stringMatching(/.+/), message: expect.stringContaining('failpoint') }),
    ]);
    expect(lines.filter((l) => l.level === 'warn')).toEqual([
      expect.objectContaining({ pipeline: 'trips', stream: 'ghosts', run_id: errors[0]!.run_id, message: expect.stringContaining('matches no file') }),
    ]);
    expect(lines.filter((l) => l.level === 'info' && String(l.message).startsWith('progress: ')).length).toBeGreaterThan(0);
    // The failed stream's line is that one object (printed once), its message the text line's.
    expect(errors[0]!.message).toMatch(/^trips\.trips: FAILED: /);
  });

  it('is also switched on by TIDEMARK_LOG_FORMAT=json, and ends a command on a config error with one object', async () => {
    const bad = await writeYaml(dir, 'bad.yaml', 'name: bad\nsource: { type: nowhere }\n');
    const out = await cli(['validate', bad], { env: { TIDEMARK_LOG_FORMAT: 'json' } });
    expect(out.code).toBe(2);
    expect(objects(out.stderr)).toEqual([expect.objectContaining({ level: 'error', error_kind: 'config', message: expect.any(String) })]);
  });

  it('leaves text lines as they are by default, and refuses a format it does not know', async () => {
    const text = await cli(['run', config, '--stream', 'ghosts']);
    expect(text.stderr).toMatch(/^warn: pipeline trips, stream ghosts: pattern ghosts\/g_\{month\}\.parquet matches no file/m);
    const wrong = await cli(['--log-format', 'xml', 'run', config]);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('--log-format must be text or json, not xml');
  });
});
