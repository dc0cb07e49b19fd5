/**
 * `tidemark schedule`: evaluates each pipeline's cron (croner, in its `timezone`) and dispatches ticks. A pipeline
 * never overlaps itself: a tick that comes while its previous run goes on is skipped and logged, or (`overlap:
 * queue`) run once when that run ends. The last tick per pipeline is persisted, so after downtime `catch_up: latest`
 * runs once for the latest missed tick and `catch_up: none` drops them.
 *
 * The loop computes due times itself instead of letting croner fire callbacks: one code path serves catch-up,
 * `--once` and ticks, and a process that slept (laptop lid, SIGSTOP) sees its missed ticks as one, not a burst.
 */
import { Cron } from 'croner';
import type { Logger } from '../core/logger.js';
import type { PipelineConfig } from '../config/load.js';
import type { DispatchOutcome, Dispatcher } from './dispatch.js';
import type { PendingRetry, TickStore } from './tick-store.js';
import { nextRetry } from './retry-policy.js';

/** `catch_up: none` with `--once`: a tick counts as "now" when it is at most this old. */
const ONCE_WINDOW_MS = 60_000;
/** The loop wakes at least this often, so clock jumps are noticed. */
const MAX_SLEEP_MS = 30_000;

interface Entry {
  readonly pipeline: PipelineConfig;
  readonly cron: Cron;
  running?: Promise<DispatchOutcome>;
  /** `overlap: queue`: a tick arrived while running; run once more when the run ends. */
  queued?: Date;
  next: Date | null;
}

export interface SchedulerOptions {
  readonly dispatcher: Dispatcher;
  readonly ticks: TickStore;
  readonly logger: Logger;
  readonly now?: () => Date;
}

export interface OnceResult {
  readonly pipeline: string;
  readonly tick: string;
  readonly outcome: DispatchOutcome;
  /** Set when this run was a retry of its tick: which one. */
  readonly retry?: number;
}

export class Scheduler {
  private readonly entries: Entry[];
  private readonly controller = new AbortController();
  private readonly now: () => Date;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  /** Pipelines without `schedule:` are left out (and named in the log). */
  constructor(
    pipelines: readonly PipelineConfig[],
    private readonly options: SchedulerOptions,
  ) {
    this.now = options.now ?? (() => new Date());
    this.entries = [];
    for (const pipeline of pipelines) {
      if (pipeline.schedule === undefined) {
        options.logger.log('warn', `${pipeline.name}: no schedule: in ${pipeline.file ?? 'its config'}; not scheduled`);
        continue;
      }
      const cron = new Cron(pipeline.schedule, { paused: true, ...(pipeline.timezone !== undefined ? { timezone: pipeline.timezone } : {}) });
      this.entries.push({ pipeline, cron, next: null });
    }
  }

  get scheduled(): readonly PipelineConfig[] {
    return this.entries.map((e) => e.pipeline);
  }

  /** Catches up missed ticks per `catch_up`, then ticks until `stop()`. */
  async start(): Promise<void> {
    const now = this.now();
    for (const entry of this.entries) {
      const name = entry.pipeline.name;
      const last = this.options.ticks.lastTick(name);
      const missed = latestTick(entry.cron, now);
      entry.next = entry.cron.nextRun(now);
      const when = `next tick ${entry.next?.toISOString() ?? 'never'}${entry.pipeline.timezone ? ` (${entry.pipeline.timezone})` : ''}`;
      if (last === undefined || missed === undefined || missed <= last) {
        // A first start has nothing to catch up; remembering "now" lets a later restart see what it missed.
        if (last === undefined) await this.options.ticks.record(name, now);
        this.options.logger.log('info', `${name}: scheduled "${entry.pipeline.schedule}", ${when}`);
        continue;
      }
      if (entry.pipeline.catchUp === 'none') {
        this.options.logger.log('info', `${name}: missed tick ${missed.toISOString()} while down (catch_up: none); ${when}`);
        await this.options.ticks.record(name, missed);
        continue;
      }
      this.options.logger.log('info', `${name}: missed tick ${missed.toISOString()} while down; catching up once (catch_up: latest); ${when}`);
      await this.tick(entry, missed);
    }
    this.arm();
  }

  /** Dispatches every pipeline that is due now and waits for them (`--once`, for system cron and CI). */
  async once(): Promise<OnceResult[]> {
    const now = this.now();
    const due: [Entry, Date, number][] = [];
    for (const entry of this.entries) {
      const last = this.options.ticks.lastTick(entry.pipeline.name);
      const tick = latestTick(entry.cron, now);
      if (tick === undefined || (last !== undefined && tick <= last)) {
        const retry = this.dueRetry(entry, now);
        if (retry !== undefined) due.push([entry, retry.tick, retry.failures]);
        continue;
      }
      if (last !== undefined && entry.pipeline.catchUp === 'none' && now.getTime() - tick.getTime() > ONCE_WINDOW_MS) {
        this.options.logger.log('info', `${entry.pipeline.name}: tick ${tick.toISOString()} is past (catch_up: none); not run`);
        await this.options.ticks.record(entry.pipeline.name, tick);
        continue;
      }
      due.push([entry, tick, 0]);
    }
    if (due.length === 0) this.options.logger.log('info', 'nothing is due');
    return Promise.all(
      due.map(async ([entry, tick, failures]) => {
        if (failures === 0) await this.options.ticks.record(entry.pipeline.name, tick);
        const outcome = await this.attempt(entry, tick, failures);
        return { pipeline: entry.pipeline.name, tick: tick.toISOString(), outcome, ...(failures > 0 ? { retry: failures } : {}) };
      }),
    );
  }

  /** The pipeline's pending retry when it is due at `now`; one still waiting is logged with its time. */
  private dueRetry(entry: Entry, now: Date): PendingRetry | undefined {
    const retry = this.options.ticks.pendingRetry(entry.pipeline.name);
    if (retry === undefined) return undefined;
    if (retry.due <= now) return retry;
    this.options.logger.log('info', `${entry.pipeline.name}: ${this.retryName(entry, retry)} of tick ${retry.tick.toISOString()} waits until ${retry.due.toISOString()}`);
    return undefined;
  }

  private retryName(entry: Entry, retry: PendingRetry): string {
    return `retry ${retry.failures}/${entry.pipeline.retry?.count ?? 0}`;
  }

  /**
   * Runs one try of a tick (`failures` earlier tries failed) and settles its retry: a failure plans the next try per
   * `retry:` (or says none is left); anything else clears it. A new tick's run drops an older tick's pending retry:
   * it reads everything that one would have.
   */
  private async attempt(entry: Entry, tick: Date, failures: number): Promise<DispatchOutcome> {
    const name = entry.pipeline.name;
    const pending = this.options.ticks.pendingRetry(name);
    if (failures > 0) this.options.logger.log('info', `${name}: tick ${tick.toISOString()}: ${this.retryName(entry, { tick, failures, due: tick })}`);
    else if (pending !== undefined) this.options.logger.log('info', `${name}: ${this.retryName(entry, pending)} of tick ${pending.tick.toISOString()} dropped: tick ${tick.toISOString()} runs now`);
    const outcome = await this.options.dispatcher.dispatch(entry.pipeline, tick, this.controller.signal).catch((): DispatchOutcome => 'failed');
    const next = outcome === 'failed' && !this.stopped ? nextRetry(entry.pipeline.retry, tick, failures + 1, this.now()) : undefined;
    if (next !== undefined) {
      this.options.logger.log('warn', `${name}: tick ${tick.toISOString()} failed; ${this.retryName(entry, next)} at ${next.due.toISOString()}`);
    } else if (outcome === 'failed' && entry.pipeline.retry !== undefined) {
      this.options.logger.log('error', `${name}: tick ${tick.toISOString()} failed ${failures + 1} time(s); no retry left (retry: count ${entry.pipeline.retry.count})`);
    } else if (failures > 0 && outcome !== 'failed') {
      this.options.logger.log('info', `${name}: tick ${tick.toISOString()}: ${outcome} on retry ${failures}`);
    }
    if (next !== undefined || pending !== undefined) {
      await this.options.ticks.setRetry(name, next).catch((e: unknown) => this.options.logger.log('warn', `cannot record the retry of ${name}: ${(e as Error).message}`));
    }
    return outcome;
  }

  /**
   * Takes no more ticks; running runs get `graceMs` to finish, then are aborted (they roll back at their next batch).
   * Resolves true when everything finished within the grace period.
   */
  async stop(graceMs: number): Promise<boolean> {
    this.stopped = true;
    clearTimeout(this.timer);
    for (const e of this.entries) e.queued = undefined;
    const running = (): Promise<unknown>[] => this.entries.flatMap((e) => (e.running ? [e.running] : []));
    if (running().length === 0) return true;
    this.options.logger.log('info', `stopping: waiting up to ${Math.round(graceMs / 1000)}s for ${running().length} running run(s)`);
    let timer: NodeJS.Timeout | undefined;
    const inTime = await Promise.race([
      Promise.allSettled(running()).then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), graceMs))),
    ]);
    clearTimeout(timer);
    if (inTime) return true;
    this.options.logger.log('warn', 'grace period over: stopping running runs; what they have not committed rolls back');
    this.controller.abort(new Error('the scheduler is shutting down'));
    await Promise.race([Promise.allSettled(running()), new Promise((resolve) => setTimeout(resolve, 10_000).unref())]);
    return false;
  }

  private arm(): void {
    if (this.stopped) return;
    const now = this.now().getTime();
    const retryAt = (e: Entry) => this.options.ticks.pendingRetry(e.pipeline.name)?.due.getTime() ?? Infinity;
    const next = Math.min(...this.entries.map((e) => Math.min(e.next?.getTime() ?? Infinity, retryAt(e))));
    if (next === Infinity) return;
    this.timer = setTimeout(() => void this.wake(), Math.max(0, Math.min(next - now, MAX_SLEEP_MS)));
  }

  private async wake(): Promise<void> {
    if (this.stopped) return;
    const now = this.now();
    for (const entry of this.entries) {
      const retry = this.options.ticks.pendingRetry(entry.pipeline.name);
      if (retry !== undefined && retry.due <= now && !entry.running && (entry.next === null || entry.next > now)) this.launch(entry, retry.tick, retry.failures);
      if (entry.next === null || entry.next > now) continue;
      // Several ticks passed at once (the process slept): they count as one, the latest.
      const tick = latestTick(entry.cron, now) ?? entry.next;
      entry.next = entry.cron.nextRun(now);
      await this.tick(entry, tick);
    }
    this.arm();
  }

  private async tick(entry: Entry, tick: Date): Promise<void> {
    const name = entry.pipeline.name;
    await this.options.ticks.record(name, tick).catch((e: unknown) => this.options.logger.log('warn', `cannot record the tick of ${name}: ${(e as Error).message}`));
    if (entry.running) {
      if (entry.pipeline.overlap === 'queue') {
        entry.queued = tick;
        this.options.logger.log('info', `${name}: tick ${tick.toISOString()}: previous run still going; runs when it ends (overlap: queue)`);
      } else {
        this.options.logger.log('info', `${name}: tick ${tick.toISOString()} skipped: previous run still going (overlap: skip)`);
      }
      return;
    }
    this.launch(entry, tick);
  }

  private launch(entry: Entry, tick: Date, failures = 0): void {
    if (failures === 0) this.options.logger.log('info', `${entry.pipeline.name}: tick ${tick.toISOString()}: starting`);
    const running = this.attempt(entry, tick, failures);
    entry.running = running;
    void running.finally(() => {
      entry.running = undefined;
      const queued = entry.queued;
      entry.queued = undefined;
      if (queued !== undefined && !this.stopped) this.launch(entry, queued);
      // A retry planned by this run is due later: wake for it.
      else if (!this.stopped) {
        clearTimeout(this.timer);
        this.arm();
      }
    });
  }
}

/** The latest scheduled time at or before `now`, if any. */
export function latestTick(cron: Cron, now: Date): Date | undefined {
  // previousRuns looks strictly before its reference, so a reference a second later includes a tick exactly at
  // `now`; but within the last second before the coming tick it returns that coming tick, so take two and keep the
  // first that is not in the future.
  return cron.previousRuns(2, new Date(now.getTime() + 1000)).find((tick) => tick.getTime() <= now.getTime());
}
