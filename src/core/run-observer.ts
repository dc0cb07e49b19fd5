/**
 * What a run tells an observer (telemetry, notifications) as it goes: plain figures, no telemetry library types, so
 * the engine stays free of them and a run with nothing observing pays for one no-op call per stream and commit.
 */
import type { RunResult, StreamResult } from './types.js';

/** One commit of a stream's load transaction, timed around the destination's commit. */
export interface CommitFigures {
  readonly stream: string;
  /** Rows read and loaded by the stream so far (the run record the commit wrote). */
  readonly rowsRead: number;
  readonly rowsLoaded: number;
  readonly rowsRejected: number;
  /** Bytes of the bulk chunks and partition files this transaction staged (0 when rows travelled as values). */
  readonly bytes: number;
  /** Partitions whose ledger rows this commit wrote. */
  readonly partitions: readonly string[];
  /** When the commit began and how long it took, in milliseconds (epoch; duration on the monotonic clock). */
  readonly startedAtMs: number;
  readonly durationMs: number;
}

export interface RunObserver {
  streamStarted(stream: string, strategy: string): void;
  committed(commit: CommitFigures): void;
  streamFinished(result: StreamResult, strategy: string): void;
  /** `result` is undefined when the run itself failed (lease, connect, config); `error` then says why. */
  runFinished(result: RunResult | undefined, error?: unknown): void;
}

export interface RunObserverFactory {
  runStarted(pipeline: string, runId: string): RunObserver;
}

export const NO_OBSERVER: RunObserver = {
  streamStarted: () => undefined,
  committed: () => undefined,
  streamFinished: () => undefined,
  runFinished: () => undefined,
};

/**
 * One observer telling several (telemetry and notifications), or NO_OBSERVER when there is none. An observer that
 * throws is ignored: telemetry and alerts never change what a run does.
 */
export function allObservers(observers: readonly (RunObserver | undefined)[]): RunObserver {
  const present = observers.filter((o): o is RunObserver => o !== undefined);
  if (present.length === 0) return NO_OBSERVER;
  const each = (call: (o: RunObserver) => void) => {
    for (const o of present) {
      try {
        call(o);
      } catch {
        // An observer's own failure is its to report; the run goes on as it would without it.
      }
    }
  };
  return {
    streamStarted: (stream, strategy) => each((o) => o.streamStarted(stream, strategy)),
    committed: (commit) => each((o) => o.committed(commit)),
    streamFinished: (result, strategy) => each((o) => o.streamFinished(result, strategy)),
    runFinished: (result, error) => each((o) => o.runFinished(result, error)),
  };
}
