/**
 * `notify:` webhooks: told when a stream or run fails, when it succeeds again after failing, when a stream's newest
 * row gets older than its `freshness:` limit, and when `verify` finds drift. Once per change of state: the last
 * state per stream is kept in `.tidemark-notify.json` beside the pipeline file, so cron runs of separate processes
 * alert once, not at every failed run. Sending happens after the run's commits, in the background, retried with
 * backoff; `flushNotifications` waits for what is still being sent before a CLI process exits.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { PipelineConfig } from '../config/load.js';
import type { NotifyConfig } from '../config/schema.js';
import { errorFields, errorMessage } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import type { RunObserver } from '../core/run-observer.js';
import type { RunResult, StreamResult } from '../core/types.js';
import { newestRowAgeSeconds } from '../telemetry/freshness.js';

export type NotifyEvent = 'failure' | 'recovery' | 'stale' | 'drift';

export interface Notice {
  readonly event: NotifyEvent;
  readonly pipeline: string;
  /** Absent when the whole run failed before any stream (lease, connection, config). */
  readonly stream?: string;
  readonly run_id?: string;
  readonly error_kind?: string;
  readonly message: string;
  readonly time: string;
}

export const NOTIFY_FILE_NAME = '.tidemark-notify.json';
/** Waits between attempts: 4 attempts in about 3.5 s, then the notice is given up (and logged). */
const BACKOFF_MS = [500, 1000, 2000];
const ATTEMPT_TIMEOUT_MS = 5_000;
const RUN = '*';

interface StreamMark {
  failed?: boolean;
  stale?: boolean;
  drift?: boolean;
}
type Marks = Record<string, Record<string, StreamMark>>;

const pending = new Set<Promise<void>>();

/** Resolves once every notice sent so far was delivered or given up. */
export async function flushNotifications(): Promise<void> {
  while (pending.size > 0) await Promise.all([...pending]);
}

/**
 * The hook for `verify`: a verify that found drift calls this with one line per difference; the pipeline's
 * webhooks that take `drift` are told once until a verify finds none (`drift: []`).
 */
export function notifyDrift(pipeline: PipelineConfig, stream: string, drift: readonly string[], logger?: Logger): void {
  const marks = new MarkFile(pipeline);
  const mark = marks.get(stream);
  const drifted = drift.length > 0;
  if (drifted && mark.drift !== true) send(pipeline, { event: 'drift', pipeline: pipeline.name, stream, message: `verify found drift in ${pipeline.name}.${stream}: ${drift.join('; ')}`, time: new Date().toISOString() }, logger);
  marks.set(stream, { ...mark, drift: drifted });
  marks.save();
}

export function notifyObserver(pipeline: PipelineConfig, runId: string, logger: Logger | undefined): RunObserver | undefined {
  if (pipeline.notify === undefined) return undefined;
  const marks = new MarkFile(pipeline);
  const notice = (event: NotifyEvent, message: string, extra: Partial<Notice> = {}) => send(pipeline, { event, pipeline: pipeline.name, run_id: runId, message, time: new Date().toISOString(), ...extra }, logger);
  const change = (stream: string, failed: boolean, failure: () => void, recovery: string) => {
    const was = marks.get(stream);
    if (failed && was.failed !== true) failure();
    if (!failed && was.failed === true) notice('recovery', recovery, stream === RUN ? {} : { stream });
    marks.set(stream, { ...was, failed });
  };
  return {
    streamStarted: () => undefined,
    committed: () => undefined,
    streamFinished(result: StreamResult) {
      const failed = result.outcome !== 'committed';
      change(result.stream, failed, () => notice('failure', `${pipeline.name}.${result.stream} failed: ${result.error ?? result.outcome}`, { stream: result.stream, ...(result.errorKind ? { error_kind: result.errorKind } : {}) }), `${pipeline.name}.${result.stream} succeeded again`);
      if (!failed) checkFreshness(result);
    },
    runFinished(result: RunResult | undefined, error?: unknown) {
      const failed = result === undefined;
      const kind = error !== undefined ? errorFields(error).error_kind : undefined;
      change(RUN, failed, () => notice('failure', `${pipeline.name}: the run failed: ${errorMessage(error)}`, kind !== undefined ? { error_kind: kind } : {}), `${pipeline.name}: runs succeed again`);
      marks.save();
    },
  };

  function checkFreshness(result: StreamResult): void {
    const limit = pipeline.streams.find((s) => s.name === result.stream)?.freshnessMs;
    if (limit === undefined) return;
    const age = newestRowAgeSeconds(result.watermark?.cursor.value ?? result.cursorMax);
    if (age === undefined) return;
    const was = marks.get(result.stream);
    const stale = age * 1000 > limit;
    if (stale && was.stale !== true) notice('stale', `${pipeline.name}.${result.stream} is stale: its newest row is ${describeAge(age)} old (freshness: ${describeAge(limit / 1000)})`, { stream: result.stream });
    marks.set(result.stream, { ...marks.get(result.stream), stale });
  }
}

function describeAge(seconds: number): string {
  if (seconds >= 2 * 86_400) return `${Math.floor(seconds / 86_400)} d`;
  if (seconds >= 2 * 3600) return `${Math.floor(seconds / 3600)} h`;
  if (seconds >= 120) return `${Math.floor(seconds / 60)} min`;
  return `${Math.floor(seconds)} s`;
}

function send(pipeline: PipelineConfig, notice: Notice, logger: Logger | undefined): void {
  for (const target of pipeline.notify ?? []) {
    if (target.on !== undefined && !target.on.includes(notice.event)) continue;
    const delivery = deliver(target, notice).catch((error: unknown) =>
      logger?.log('warn', `pipeline ${pipeline.name}: notify ${notice.event} not delivered: ${errorMessage(error)}`, { pipeline: pipeline.name, ...(notice.stream ? { stream: notice.stream } : {}) }),
    );
    const tracked = delivery.then(() => undefined);
    pending.add(tracked);
    void tracked.finally(() => pending.delete(tracked));
  }
}

export function noticeBody(target: NotifyConfig, notice: Notice): string {
  if (target.format === 'slack') return JSON.stringify({ text: `tidemark ${notice.event}: ${notice.message}` });
  return JSON.stringify(notice);
}

async function deliver(target: NotifyConfig, notice: Notice): Promise<void> {
  const body = noticeBody(target, notice);
  for (let attempt = 0; ; attempt += 1) {
    try {
      const response = await fetch(target.webhook, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS) });
      await response.arrayBuffer().catch(() => undefined);
      if (response.ok) return;
      // A refusal of the notice itself will not change by sending it again; a busy or failing receiver may.
      if (response.status < 500 && response.status !== 429 && response.status !== 408) throw new Error(`the webhook answered ${response.status}`);
      if (attempt >= BACKOFF_MS.length) throw new Error(`the webhook answered ${response.status} to ${attempt + 1} attempts`);
    } catch (error) {
      if (attempt >= BACKOFF_MS.length || (error instanceof Error && error.message.startsWith('the webhook answered'))) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, BACKOFF_MS[attempt]));
  }
}

/** The last notified state per stream of one pipeline, in a JSON file beside its pipeline file (in memory without one). */
class MarkFile {
  private readonly path: string | undefined;
  private readonly all: Marks;

  constructor(private readonly pipeline: PipelineConfig) {
    this.path = pipeline.file !== undefined ? join(dirname(pipeline.file), NOTIFY_FILE_NAME) : undefined;
    this.all = this.path !== undefined ? readMarks(this.path) : MEMORY[pipeline.name] ? { [pipeline.name]: MEMORY[pipeline.name]! } : {};
  }

  get(stream: string): StreamMark {
    return this.all[this.pipeline.name]?.[stream] ?? {};
  }

  set(stream: string, mark: StreamMark): void {
    this.all[this.pipeline.name] = { ...this.all[this.pipeline.name], [stream]: mark };
  }

  save(): void {
    if (this.path === undefined) {
      MEMORY[this.pipeline.name] = this.all[this.pipeline.name] ?? {};
      return;
    }
    const next = `${this.path}.${process.pid}.tmp`;
    writeFileSync(next, `${JSON.stringify(this.all, null, 2)}\n`);
    renameSync(next, this.path);
  }
}

const MEMORY: Record<string, Record<string, StreamMark>> = {};

/** A missing or damaged file reads as nothing told yet: at worst a change is told again. */
function readMarks(path: string): Marks {
  try {
    return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as Marks) : {};
  } catch {
    return {};
  }
}
