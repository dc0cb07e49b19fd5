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

/** Fails its first `failures` dispatches, then commits. */
class FlakyDispatcher implements Dispatcher {
  readonly ticks: string[] = [];
  constructor(private failures: number) {}
  dispatch(_pipeline: PipelineConfig, tick: Date): Promise<DispatchOutcome> {
    this.ticks.push(tick.toISOString());
    return Promise.resolve(this.failures-- > 0 ? 'failed' : 'committed');
  }
}

describe('retry: of a failed tick (fake clock)', () => {
  const retrying = (count: number) =>
    parsePipeline(`name: p\nsource: {type: sqlite, path: ./s.db}\nschedule: "0 * * * *"\ntimezone: UTC\nretry: {count: ${count}, backoff: 30s}\nstreams:\n  - table: t\n`, {
      file: join(root, 'p.yaml'),
    });

  it('--once retries the failed tick on later calls, after a doubling backoff, until it commits or none is left', async () => {
    const file = join(root, `ticks-${(n += 1)}.json`);
    const dispatcher = new FlakyDispatcher(2);
    let now = new Date('2026-01-01T10:00:05.000Z');
    const once = async () => {
      // Each call is a new process: the pending retry comes from the tick file.
      const ticks = await TickStore.open(file);
      return new Scheduler([retrying(3)], { dispatcher, ticks, logger: silentLogger, now: () => now }).once();
    };
    expect((await once()).map((r) => r.outcome)).toEqual(['failed']);
    now = new Date('2026-01-01T10:00:20.000Z');
    expect(await once()).toEqual([]); // the first retry waits 30 s after the failure
    now = new Date('2026-01-01T10:00:35.000Z');
    expect(await once()).toEqual([{ pipeline: 'p', tick: '2026-01-01T10:00:00.000Z', outcome: 'failed', retry: 1 }]);
    now = new Date('2026-01-01T10:01:30.000Z');
    expect(await once()).toEqual([]); // the second waits 60 s
    now = new Date('2026-01-01T10:01:36.000Z');
    expect(await once()).toEqual([{ pipeline: 'p', tick: '2026-01-01T10:00:00.000Z', outcome: 'committed', retry: 2 }]);
    now = new Date('2026-01-01T10:30:00.000Z');
    expect(await once()).toEqual([]);
    expect(dispatcher.ticks).toEqual(Array(3).fill('2026-01-01T10:00:00.000Z'));
    expect((await TickStore.open(file)).pendingRetry('p')).toBeUndefined();
  });

  it('stops after count retries, and a new tick drops the pending retry of an older one', async () => {
    const file = join(root, `ticks-${(n += 1)}.json`);
    const dispatcher = new FlakyDispatcher(10);
    let now = new Date('2026-01-01T10:00:05.000Z');
    const once = async () => new Scheduler([retrying(1)], { dispatcher, ticks: await TickStore.open(file), logger: silentLogger, now: () => now }).once();
    await once();
    now = new Date('2026-01-01T10:00:40.000Z');
    expect((await once())[0]).toMatchObject({ outcome: 'failed', retry: 1 });
    expect((await TickStore.open(file)).pendingRetry('p')).toBeUndefined();
    now = new Date('2026-01-01T10:30:00.000Z');
    expect(await once()).toEqual([]);
    now = new Date('2026-01-01T11:00:01.000Z');
    expect((await once())[0]).toMatchObject({ tick: '2026-01-01T11:00:00.000Z', outcome: 'failed' });
    now = new Date('2026-01-01T12:00:01.000Z');
    // The 11:00 retry was due at 11:00:31, but the 12:00 tick runs instead and takes its place.
    expect(await once()).toEqual([{ pipeline: 'p', tick: '2026-01-01T12:00:00.000Z', outcome: 'failed' }]);
    expect((await TickStore.open(file)).pendingRetry('p')).toMatchObject({ tick: new Date('2026-01-01T12:00:00.000Z'), failures: 1 });
  });
});
