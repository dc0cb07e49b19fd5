/**
 * `tidemark run`'s progress, on stderr. On a terminal: one line per stream, a bar with percentage and ETA where a
 * total is known (the source's row estimate, or partitions i/N), else a spinner with rows, rows/s and elapsed time.
 * Off a terminal: a plain line when a stream begins and then every few seconds. Never on stdout.
 */
import { createRequire } from 'node:module';
import type { PartitionProgress, ProgressDetail, ProgressListener } from '../engine/progress.js';
import { formatLogLine, logFormat } from '../core/logger.js';
import { writeOut } from '../core/stdio.js';
import type { RunResult } from '../core/types.js';
import { monotonicMs } from '../core/run-clock.js';
import { formatCount } from './output.js';

export interface ProgressDisplay {
  readonly onProgress: ProgressListener;
  /** The run ended (without a result when it threw): every line shows its final figures and outcome. */
  finish(result?: RunResult): void;
  /** Text for stderr (log lines): above the bars while they are drawn, so neither garbles the other. */
  write(text: string): void;
}

/** Off a terminal, how often a stream's line repeats (the first one is printed at once). */
const PLAIN_INTERVAL_MS = 5000;
const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const BAR_WIDTH = 24;

interface StreamLine {
  readonly stream: string;
  readonly name: string;
  readonly started: number;
  rows: number;
  detail: ProgressDetail | undefined;
  /** When the next stream began or the run ended. */
  ended: number | undefined;
  /** Known once the run has ended: a failed stream keeps the share it reached. */
  outcome: 'done' | 'failed' | undefined;
}

/**
 * A terminal gets bars; anything else plain lines, except under --json (a script reads that run's output). Decided at
 * the first report, not before: a run that reads nothing never builds `process.stderr` (~2 ms) nor loads cli-progress.
 */
export function progressDisplay(pipeline: string, options: { json: boolean }): ProgressDisplay {
  let chosen: ProgressDisplay | undefined;
  let decided = false;
  return {
    onProgress(stream, rows, detail) {
      if (!decided) {
        decided = true;
        chosen = process.stderr.isTTY === true ? barDisplay(pipeline) : options.json ? undefined : plainDisplay(pipeline);
      }
      chosen?.onProgress(stream, rows, detail);
    },
    finish: (result) => chosen?.finish(result),
    write: (text) => (chosen ? chosen.write(text) : writeOut(2, text)),
  };
}

export function formatElapsed(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${(ms / 1000).toFixed(1)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, '0')}m`;
}

/** How far the stream is, 0…1, when it can be told. */
function fraction(line: StreamLine): number | undefined {
  const partition = line.detail?.partition;
  if (partition !== undefined) return (partition.index - 1 + withinPartition(line.rows, partition)) / partition.count;
  const total = line.detail?.rowsTotal;
  if (total === undefined) return undefined;
  return total === 0 ? 1 : Math.min(1, line.rows / total);
}

function withinPartition(rows: number, p: PartitionProgress): number {
  if (p.rows === undefined || p.rows === 0) return 0;
  return Math.min(1, (rows - p.rowsBefore) / p.rows);
}

function rate(line: StreamLine, now: number): string {
  const seconds = ((line.ended ?? now) - line.started) / 1000;
  return `${formatCount(seconds > 0 ? Math.round(line.rows / seconds) : 0)} rows/s`;
}

/** "of ~N rows", "partition i/N id" or "ranges done/total": what the line knows of the whole. */
function extent(line: StreamLine): string {
  const p = line.detail?.partition;
  if (p !== undefined) return `partition ${p.index}/${p.count} ${p.id}`;
  const total = line.detail?.rowsTotal;
  const rows = total === undefined ? '' : `of ~${formatCount(Math.max(total, line.rows))}`;
  const ranges = line.detail?.ranges;
  return ranges === undefined ? rows : `${rows}${rows ? ', ' : ''}ranges ${ranges.done}/${ranges.total}`;
}

function eta(line: StreamLine, done: number, now: number): string {
  if (line.ended !== undefined) return '';
  if (done <= 0) return 'ETA —';
  return `ETA ${formatElapsed(((now - line.started) * (1 - done)) / done)}`;
}

export function renderLine(line: StreamLine, now: number): string {
  const elapsed = formatElapsed((line.ended ?? now) - line.started);
  const rows = `${formatCount(line.rows)} rows`;
  const known = fraction(line);
  // A total from statistics is an estimate: a stream that completed is at 100% whatever it said.
  const done = known !== undefined && line.outcome === 'done' ? 1 : known;
  const failed = line.outcome === 'failed' ? 'failed' : '';
  if (done === undefined) {
    const mark = line.outcome === 'done' ? '✓' : line.outcome === 'failed' ? '✗' : line.ended !== undefined ? '·' : SPINNER[Math.floor(now / 100) % SPINNER.length]!;
    return [`${line.name}  ${mark} ${rows}`, rate(line, now), elapsed, failed].filter((p) => p.length > 0).join('  ');
  }
  const filled = Math.round(done * BAR_WIDTH);
  const bar = `${'█'.repeat(filled)}${'░'.repeat(BAR_WIDTH - filled)}`;
  const parts = [`${line.name}  [${bar}] ${String(Math.floor(done * 100)).padStart(3)}%`, `${rows} ${extent(line)}`.trimEnd(), rate(line, now), elapsed, failed || eta(line, done, now)];
  return parts.filter((p) => p.length > 0).join('  ');
}

interface Tracker {
  update(stream: string, rows: number, detail?: ProgressDetail): { line: StreamLine; added: boolean };
  finish(result: RunResult | undefined): void;
}

/** Tracks the streams of one run; streams run one after another, so a new stream ends the one before it. */
function tracker(pipeline: string): Tracker {
  const lines = new Map<string, StreamLine>();
  const endAll = () => {
    const now = monotonicMs();
    for (const l of lines.values()) l.ended ??= now;
  };
  return {
    update(stream, rows, detail) {
      let line = lines.get(stream);
      const added = line === undefined;
      if (line === undefined) {
        endAll();
        line = { stream, name: `${pipeline}.${stream}`, started: detail?.startedAt ?? monotonicMs(), rows, detail, ended: undefined, outcome: undefined };
        lines.set(stream, line);
      }
      line.rows = rows;
      if (detail !== undefined) line.detail = detail;
      return { line, added };
    },
    finish(result) {
      endAll();
      for (const l of lines.values()) l.outcome = result?.streams.find((s) => s.stream === l.stream)?.outcome === 'committed' ? 'done' : 'failed';
    },
  };
}

function barDisplay(pipeline: string): ProgressDisplay {
  const { MultiBar } = createRequire(import.meta.url)('cli-progress') as typeof import('cli-progress').default;
  const streams = tracker(pipeline);
  const multi = new MultiBar({
    stream: process.stderr,
    fps: 10,
    hideCursor: true,
    clearOnComplete: false,
    // The run's own SIGINT/SIGTERM handling stops it and then calls finish().
    gracefulExit: false,
    format: (_options, _params, payload) => renderLine(payload.line as StreamLine, monotonicMs()),
  });
  // Each bar renders its line object, which the tracker updates in place; cli-progress redraws on its timer.
  let bars = 0;
  return {
    onProgress(stream, rows, detail) {
      const { line, added } = streams.update(stream, rows, detail);
      if (!added) return;
      multi.create(1, 0, { line });
      bars += 1;
    },
    finish(result) {
      streams.finish(result);
      if (bars === 0) return;
      // A redraw first: it prints log lines still waiting for the next frame (stop() would drop them).
      multi.update();
      multi.stop();
    },
    write(text) {
      if (bars > 0) multi.log(text);
      else writeOut(2, text);
    },
  };
}

function plainDisplay(pipeline: string): ProgressDisplay {
  const streams = tracker(pipeline);
  const printed = new Map<StreamLine, number>();
  return {
    onProgress(stream, rows, detail) {
      const { line } = streams.update(stream, rows, detail);
      const now = monotonicMs();
      const last = printed.get(line);
      if (last !== undefined && now - last < PLAIN_INTERVAL_MS) return;
      printed.set(line, now);
      const whole = extent(line);
      const done = fraction(line);
      const text = `${line.name}: ${formatCount(rows)} rows read${whole ? ` (${whole}${done !== undefined ? `, ${Math.floor(done * 100)}%` : ''})` : ''}, ${rate(line, now)}, ${formatElapsed(now - line.started)} elapsed`;
      // Under --log-format json a log shipper reads stderr: progress is a line of it like any other.
      writeOut(2, logFormat() === 'json' ? formatLogLine('info', `progress: ${text}`, { pipeline, stream }) : `progress: ${text}\n`);
    },
    finish(result) {
      streams.finish(result);
    },
    write: (text) => writeOut(2, text),
  };
}
