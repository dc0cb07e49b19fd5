/**
 * Durations come from the monotonic clock: a wall clock stepped back 10 minutes in the middle of a run made it report
 * a negative duration and a finish before its start.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange } from '../../helpers/shop.js';

const STEP = fileURLToPath(new URL('./clock-back.mjs', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

it('a run across a wall clock stepped back 10 minutes reports a positive duration and finishes after it started', async () => {
  const source = join(dir, 'source.sqlite');
  createItems(source, itemRange(1, 300, 3));
  const config = await writeYaml(
    dir,
    'p.yaml',
    `name: items
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 50
    batch_rows: 25
destination: {type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))}}
`,
  );
  const out = await cli(['run', '--json', config], {
    env: {
      NODE_OPTIONS: `--import=${STEP}`,
      TIDEMARK_TEST_CLOCK_BACK_MS: '600000',
      TIDEMARK_TEST_CLOCK_BACK_AFTER_MS: '1500',
      // The first commit waits past the step, so the run spans it.
      TIDEMARK_FAILPOINTS: 'load.after_commit=1:sleep(2500)',
    },
  });
  expect(out.code, out.stderr).toBe(0);
  const result = JSON.parse(out.stdout);
  expect(result.streams[0].rows_loaded).toBe(300);
  expect(result.streams[0].duration_ms).toBeGreaterThanOrEqual(2000);
  expect(Date.parse(result.finished_at)).toBeGreaterThanOrEqual(Date.parse(result.started_at) + 2000);
  const runs = await cli(['runs', '--json', '--config', config]);
  const record = JSON.parse(runs.stdout)[0];
  expect(Date.parse(record.finished_at) - Date.parse(record.started_at)).toBeGreaterThanOrEqual(2000);
});
