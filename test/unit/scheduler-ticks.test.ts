/** The scheduler's tick arithmetic against a fake clock: `--once` and catch-up at every offset within a second. */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePipeline } from '../../src/index.js';
import type { Dispatcher, DispatchOutcome } from '../../src/scheduler/dispatch.js';
import { latestTick, Scheduler } from '../../src/scheduler/scheduler.js';
import { TickStore } from '../../src/scheduler/tick-store.js';
import { silentLogger } from '../../src/core/logger.js';
import { Cron } from 'croner';
import { tempDir } from '../helpers/fs.js';
import type { PipelineConfig } from '../../src/config/load.js';

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-ticks-')));
afterAll(() => cleanup());

/** Records each dispatch instead of running a pipeline: the clock and the tick file are what is under test. */
class RecordingDispatcher implements Dispatcher {
  readonly ticks: string[] = [];
  dispatch(_pipeline: PipelineConfig, tick: Date): Promise<DispatchOutcome> {
    this.ticks.push(tick.toISOString());
    return Promise.resolve('committed');
  }
}

const pipeline = (schedule: string, catchUp = 'latest') =>
  parsePipeline(`name: p\nsource: {type: sqlite, path: ./s.db}\nschedule: "${schedule}"\ntimezone: UTC\ncatch_up: ${catchUp}\nstreams:\n  - table: t\n`, { file: join(root, 'p.yaml') });

const OFFSETS = [0, 1, 250, 500, 998, 999];
let n = 0;

async function onceAt(schedule: string, lastTick: string, now: Date, catchUp = 'latest'): Promise<string[]> {
  const ticks = await TickStore.open(join(root, `ticks-${(n += 1)}.json`));
  await ticks.record('p', new Date(lastTick));
  const dispatcher = new RecordingDispatcher();
  const scheduler = new Scheduler([pipeline(schedule, catchUp)], { dispatcher, ticks, logger: silentLogger, now: () => now });
  await scheduler.once();
  return dispatcher.ticks;
}

describe('scheduler tick arithmetic (fake clock)', () => {
  it.each(OFFSETS)('latestTick is the tick at or before now, never the coming one (offset %i ms)', (ms) => {
    const perSecond = new Cron('* * * * * *', { paused: true, timezone: 'UTC' });
    const fiveMinutes = new Cron('*/5 * * * *', { paused: true, timezone: 'UTC' });
    expect(latestTick(perSecond, new Date(Date.UTC(2026, 0, 1, 10, 0, 7, ms)))?.toISOString()).toBe('2026-01-01T10:00:07.000Z');
    expect(latestTick(fiveMinutes, new Date(Date.UTC(2026, 0, 1, 10, 4, 59, ms)))?.toISOString()).toBe('2026-01-01T10:00:00.000Z');
    expect(latestTick(fiveMinutes, new Date(Date.UTC(2026, 0, 1, 10, 5, 0, ms)))?.toISOString()).toBe('2026-01-01T10:05:00.000Z');
  });

  it.each(OFFSETS)('--once runs a tick missed in the last second before the next one (offset %i ms)', async (ms) => {
    // The 10:00 tick was not taken (the last one taken was 09:55); now is 10:04:59.xxx, one second before 10:05.
    const ran = await onceAt('*/5 * * * *', '2026-01-01T09:55:00.000Z', new Date(Date.UTC(2026, 0, 1, 10, 4, 59, ms)));
    expect(ran).toEqual(['2026-01-01T10:00:00.000Z']);
  });

  it.each(OFFSETS)('--once with a per-second cron runs the current second (offset %i ms)', async (ms) => {
    const ran = await onceAt('* * * * * *', '2026-01-01T10:00:05.000Z', new Date(Date.UTC(2026, 0, 1, 10, 0, 6, ms)));
    expect(ran).toEqual(['2026-01-01T10:00:06.000Z']);
  });

  it.each(OFFSETS)('--once says nothing is due when the latest tick was taken (offset %i ms)', async (ms) => {
    const ran = await onceAt('*/5 * * * *', '2026-01-01T10:00:00.000Z', new Date(Date.UTC(2026, 0, 1, 10, 4, 59, ms)));
    expect(ran).toEqual([]);
  });

  it.each(OFFSETS)('start() catches up a tick missed while down, also in the last second (offset %i ms)', async (ms) => {
    const ticks = await TickStore.open(join(root, `ticks-${(n += 1)}.json`));
    await ticks.record('p', new Date('2026-01-01T09:55:00.000Z'));
    const dispatcher = new RecordingDispatcher();
    const scheduler = new Scheduler([pipeline('*/5 * * * *')], { dispatcher, ticks, logger: silentLogger, now: () => new Date(Date.UTC(2026, 0, 1, 10, 4, 59, ms)) });
    await scheduler.start();
    await scheduler.stop(1000);
    expect(dispatcher.ticks).toEqual(['2026-01-01T10:00:00.000Z']);
    expect(ticks.lastTick('p')?.toISOString()).toBe('2026-01-01T10:00:00.000Z');
  });
});
