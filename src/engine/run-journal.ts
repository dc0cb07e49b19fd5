/**
 * A run's journal on the machine that runs it: its live progress and its log lines, for the dashboard.
 *
 * A running stream's figures cannot be read from the destination (a DuckDB file is the run's alone while it runs),
 * so the run writes them to a small local folder instead: `<dir>/<pipeline>/live.json`, rewritten at most once a
 * second and removed when the run ends, and `<dir>/<pipeline>/runs/<run id>.jsonl`, one line per log line of the
 * run, the newest `KEPT_RUN_LOGS` kept. Nothing here can fail a run: a folder that cannot be written is skipped.
 */
import { appendFileSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, hostname } from 'node:os';
import { join } from 'node:path';
import { redact, type Logger, type LogLevel, type LogFields } from '../core/logger.js';
import { monotonicMs } from '../core/run-clock.js';
import type { ProgressDetail, ProgressListener } from './progress.js';

const KEPT_RUN_LOGS = 50;
const PROGRESS_EVERY_MS = 1000;

/** One stream's figures while it runs. */
export interface LiveStream {
  readonly rowsRead: number;
  /** Rows per second since the stream began. */
  readonly rowsPerSecond: number;
  readonly rowsTotal?: number;
  readonly partitionsDone?: number;
  readonly partitionsTotal?: number;
  readonly partition?: string;
  /** A read loaded as ranges: ranges committed, of all the load's ranges. */
  readonly rangesDone?: number;
  readonly rangesTotal?: number;
}

export interface LiveProgress {
  readonly runId: string;
  readonly pid: number;
  readonly host: string;
  readonly startedAt: string;
  readonly updatedAt: string;
  readonly streams: Readonly<Record<string, LiveStream>>;
}

export interface JournalLine {
  readonly time: string;
  readonly level: LogLevel;
  readonly stream?: string;
  readonly message: string;
}

/** `TIDEMARK_JOURNAL_DIR`, else `$XDG_STATE_HOME/tidemark`, else `~/.local/state/tidemark`; `none` turns it off. */
export function journalDir(env: NodeJS.ProcessEnv = process.env): string | null {
  const chosen = env.TIDEMARK_JOURNAL_DIR;
  if (chosen === 'none') return null;
  if (chosen) return chosen;
  return join(env.XDG_STATE_HOME || join(homedir(), '.local', 'state'), 'tidemark');
}

const pipelineDir = (dir: string, pipeline: string) => join(dir, encodeURIComponent(pipeline));

export interface RunJournal {
  readonly logger: Logger;
  readonly onProgress: ProgressListener;
  /** Records how the run ended (the failed streams' errors) and removes the live progress. */
  finish(failures: readonly { readonly stream: string; readonly error: string }[]): void;
}

/** Wraps a run's logger and progress listener so that both also reach the journal. */
export function openRunJournal(pipeline: string, runId: string, logger: Logger, onProgress: ProgressListener | undefined): RunJournal {
  const dir = journalDir();
  if (dir === null) return { logger, onProgress: onProgress ?? (() => undefined), finish: () => undefined };
  const root = pipelineDir(dir, pipeline);
  const runsDir = join(root, 'runs');
  let usable = attempt(() => {
    mkdirSync(runsDir, { recursive: true });
    pruneRunLogs(runsDir);
  });
  const logFile = join(runsDir, `${runId}.jsonl`);
  const write = (line: JournalLine) => {
    if (usable) usable = attempt(() => appendFileSync(logFile, `${redact(JSON.stringify(line))}\n`));
  };
  const live = new LiveFile(join(root, 'live.json'), runId);
  return {
    logger: {
      log(level: LogLevel, message: string, fields?: LogFields) {
        logger.log(level, message, fields);
        if (level !== 'debug') write({ time: new Date().toISOString(), level, ...(fields?.stream ? { stream: fields.stream } : {}), message });
      },
    },
    onProgress(stream: string, rowsRead: number, detail?: ProgressDetail) {
      onProgress?.(stream, rowsRead, detail);
      if (usable) live.update(stream, rowsRead, detail);
    },
    finish(failures) {
      for (const f of failures) write({ time: new Date().toISOString(), level: 'error', ...(f.stream ? { stream: f.stream } : {}), message: f.error });
      live.remove();
    },
  };
}

/** The live progress file of one run: figures per stream, written atomically and not more than once a second. */
class LiveFile {
  private readonly streams: Record<string, LiveStream> = {};
  private readonly startedAt = new Date().toISOString();
  private writtenAt = Number.NEGATIVE_INFINITY;
  private pending: NodeJS.Timeout | undefined;
  private removed = false;

  constructor(
    private readonly path: string,
    private readonly runId: string,
  ) {}

  update(stream: string, rowsRead: number, detail: ProgressDetail | undefined): void {
    const now = monotonicMs();
    const elapsedS = detail?.startedAt !== undefined ? Math.max(0.001, (now - detail.startedAt) / 1000) : null;
    const part = detail?.partition;
    this.streams[stream] = {
      rowsRead,
      rowsPerSecond: elapsedS === null ? 0 : Math.round(rowsRead / elapsedS),
      ...(detail?.rowsTotal !== undefined ? { rowsTotal: detail.rowsTotal } : {}),
      ...(part ? { partitionsDone: part.index - 1, partitionsTotal: part.count, partition: part.id } : {}),
      ...(detail?.ranges ? { rangesDone: detail.ranges.done, rangesTotal: detail.ranges.total } : {}),
    };
    // The newest figures reach the file within a second even when no report follows (a stream waiting on a commit).
    if (now - this.writtenAt < PROGRESS_EVERY_MS) {
      this.pending ??= setTimeout(() => this.write(), PROGRESS_EVERY_MS - (now - this.writtenAt)).unref();
      return;
    }
    this.write();
  }

  private write(): void {
    clearTimeout(this.pending);
    this.pending = undefined;
    if (this.removed) return;
    this.writtenAt = monotonicMs();
    const progress: LiveProgress = { runId: this.runId, pid: process.pid, host: hostname(), startedAt: this.startedAt, updatedAt: new Date().toISOString(), streams: this.streams };
    attempt(() => {
      writeFileSync(`${this.path}.${process.pid}.tmp`, JSON.stringify(progress));
      renameSync(`${this.path}.${process.pid}.tmp`, this.path);
    });
  }

  /** Only this run's own file: a later run of the pipeline may already have written its own. */
  remove(): void {
    this.removed = true;
    clearTimeout(this.pending);
    if (readLive(this.path)?.runId === this.runId) attempt(() => rmSync(this.path, { force: true }));
  }
}

function pruneRunLogs(runsDir: string): void {
  const logs = readdirSync(runsDir).filter((f) => f.endsWith('.jsonl')).sort();
  for (const old of logs.slice(0, Math.max(0, logs.length - KEPT_RUN_LOGS + 1))) rmSync(join(runsDir, old), { force: true });
}

function attempt(work: () => void): boolean {
  try {
    work();
    return true;
  } catch {
    return false;
  }
}

function readLive(path: string): LiveProgress | null {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as LiveProgress;
  } catch {
    return null;
  }
}

/** A running pipeline's live progress on this machine, or null (no run, a run elsewhere, a run that died). */
export function readLiveProgress(pipeline: string, isAlive: (pid: number) => boolean = processAlive): LiveProgress | null {
  const dir = journalDir();
  if (dir === null) return null;
  const live = readLive(join(pipelineDir(dir, pipeline), 'live.json'));
  return live !== null && live.host === hostname() && isAlive(live.pid) ? live : null;
}

/** The log lines of a pipeline's runs kept on this machine, by run id (runs elsewhere have none here). */
export function readRunLogs(pipeline: string, runIds: readonly string[]): Record<string, readonly JournalLine[]> {
  const dir = journalDir();
  const logs: Record<string, readonly JournalLine[]> = {};
  if (dir === null) return logs;
  for (const runId of new Set(runIds)) {
    try {
      const text = readFileSync(join(pipelineDir(dir, pipeline), 'runs', `${runId}.jsonl`), 'utf8');
      logs[runId] = text.split('\n').filter(Boolean).map((line) => JSON.parse(line) as JournalLine);
    } catch {
      // No log kept for this run here.
    }
  }
  return logs;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
