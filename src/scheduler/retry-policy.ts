/**
 * `retry:` of a scheduled pipeline: a tick whose run failed runs again, up to `count` times, the wait doubling from
 * `backoff` with each failure. The pending retry is kept in the tick file, so `schedule --once` started by the
 * system's cron retries it as the long-running scheduler does.
 */
import type { PendingRetry } from './tick-store.js';

export interface RetryPolicy {
  /** Runs after the first failed one; 0 never retries. */
  readonly count: number;
  /** The wait before the first retry; each further one waits twice as long as the one before. */
  readonly backoffMs: number;
}

/** The next try of `tick` after its `failures`-th failed run, or undefined when the policy has none left. */
export function nextRetry(policy: RetryPolicy | undefined, tick: Date, failures: number, now: Date): PendingRetry | undefined {
  if (policy === undefined || failures > policy.count) return undefined;
  return { tick, failures, due: new Date(now.getTime() + policy.backoffMs * 2 ** (failures - 1)) };
}
