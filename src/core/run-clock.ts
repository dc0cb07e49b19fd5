/**
 * The times of a run: its start read once from the wall clock, everything after it measured on the monotonic clock.
 * A wall clock stepped back mid-run (NTP, a VM resumed, an admin) made a run report a duration of -595 s and finish
 * before it started; measured this way, durations are never negative and finished_at never precedes started_at.
 */
import { performance } from 'node:perf_hooks';

/** Wall-clock start (ISO) → monotonic reading at that moment; runs of one process share one map. */
const anchors = new Map<string, number>();
const KEEP = 64;

/** The start of a run, as an ISO timestamp that `finishedAt` measures from. */
export function runStart(): string {
  const at = new Date().toISOString();
  anchors.set(at, performance.now());
  // A long-lived worker starts many runs: only recent ones need their anchor.
  if (anchors.size > KEEP) anchors.delete(anchors.keys().next().value!);
  return at;
}

/** Now, as `startedAt` plus the monotonic time since (the wall clock when `startedAt` is not a `runStart`). */
export function finishedAt(startedAt: string): string {
  const anchor = anchors.get(startedAt);
  if (anchor === undefined) return new Date().toISOString();
  return new Date(Date.parse(startedAt) + Math.max(0, performance.now() - anchor)).toISOString();
}

/** A monotonic reading in milliseconds, for durations (`elapsed(since)`). */
export function monotonicMs(): number {
  return performance.now();
}

export function elapsedMs(since: number): number {
  return Math.max(0, Math.round(performance.now() - since));
}
