/**
 * `tidemark ui`'s `/metrics`: figures read from each pipeline's committed state and run records, whoever ran it
 * (cron, `schedule`, a worker on another machine, the dashboard). The run counters of `telemetry/otel.ts` only count
 * runs this process performed; these gauges are what an alert on a stale or failing pipeline needs after a restart.
 * Written in the Prometheus text exposition format by hand: the values are read at each scrape, not recorded.
 */
import type { PipelineView } from './dashboard-data.js';
import type { RunRecord, StreamState } from '../core/types.js';
import type { StreamConfig } from '../config/load.js';
import { cursorTimeMs, newestRowAgeSeconds } from '../telemetry/freshness.js';

type Labels = Readonly<Record<string, string>>;

interface Family {
  readonly help: string;
  readonly samples: { readonly labels: Labels; readonly value: number }[];
}

/** The outcomes `tidemark_state_last_run_status` reports as a state set (one sample per outcome, 1 on the current one). */
const RUN_STATUSES = ['committed', 'failed', 'running', 'stopped'] as const;

/** Metric name (without the `tidemark_state_` prefix) → help text, in the order they are written. */
export const STATE_METRICS: Readonly<Record<string, string>> = {
  up: 'Whether the pipeline state could be read at this scrape (0: config error or unreadable destination)',
  running: 'Whether a run of the pipeline holds its lease now',
  version: 'Version of the pipeline state document (grows by one with every commit)',
  read_age_seconds: 'Age of the state figures served (above a second or so: the destination was busy and the last read is shown)',
  run_count: 'Runs that included the stream, the ones that moved nothing too',
  last_run_timestamp_seconds: 'Unix time the newest run including the stream started (the source was last checked)',
  checked_age_seconds: 'Seconds since the newest run including the stream started',
  last_success_timestamp_seconds: 'Unix time the newest committed run of the stream finished',
  last_run_status: 'Outcome of the newest run of the stream: 1 on its status label, 0 on the others',
  last_run_rows_read: 'Rows the newest run of the stream read and committed',
  last_run_rows_loaded: 'Rows the newest run of the stream loaded and committed',
  last_run_rows_rejected: 'Rows the newest run of the stream rejected into _tidemark_rejects',
  last_run_duration_seconds: 'Duration of the newest run of the stream',
  rows_loaded: 'Rows loaded over the run records kept for the stream (the newest 100 runs)',
  freshness_seconds: 'Age of the newest cursor value committed, when the cursor is a date or time',
  cdc_lag_seconds: 'strategy: log streams: now minus the source commit time of the newest change applied',
  partitions_loaded: 'Partitioned streams: partitions holding loaded rows',
};

class Exposition {
  private readonly families = new Map<string, Family>();

  constructor() {
    for (const [name, help] of Object.entries(STATE_METRICS)) this.families.set(name, { help, samples: [] });
  }

  set(name: keyof typeof STATE_METRICS & string, labels: Labels, value: number | undefined): void {
    if (value === undefined || !Number.isFinite(value)) return;
    this.families.get(name)!.samples.push({ labels, value });
  }

  text(): string {
    const lines: string[] = [];
    for (const [name, family] of this.families) {
      if (family.samples.length === 0) continue;
      const full = `tidemark_state_${name}`;
      lines.push(`# HELP ${full} ${family.help}`, `# TYPE ${full} gauge`);
      for (const s of family.samples) lines.push(`${full}{${labelText(s.labels)}} ${formatValue(s.value)}`);
    }
    return lines.length ? `${lines.join('\n')}\n` : '';
  }
}

function labelText(labels: Labels): string {
  // The exposition format escapes backslash, double quote and newline in label values.
  return Object.entries(labels)
    .map(([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`)
    .join(',');
}

function formatValue(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(3);
}

function seconds(iso: string | null | undefined): number | undefined {
  if (iso === null || iso === undefined) return undefined;
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? undefined : ms / 1000;
}

/** The `tidemark_state_*` gauges of every pipeline the dashboard shows, as Prometheus exposition text. */
export function stateMetricsText(views: readonly PipelineView[], nowMs = Date.now()): string {
  const out = new Exposition();
  for (const view of views) {
    const pipeline = { pipeline: view.config?.name ?? view.name };
    const snapshot = view.snapshot;
    out.set('up', pipeline, snapshot !== null && view.error === null ? 1 : 0);
    out.set('running', pipeline, view.lock?.live ? 1 : 0);
    if (!view.config || !snapshot) continue;
    out.set('version', pipeline, snapshot.state.version);
    out.set('read_age_seconds', pipeline, Math.max(0, (nowMs - Date.parse(snapshot.readAt)) / 1000));
    for (const stream of view.config.streams) {
      const labels = { ...pipeline, stream: stream.name };
      const runs = snapshot.runs.filter((r) => r.stream === stream.name);
      const partitions = snapshot.ledger.filter((p) => p.stream === stream.name && (p.status === 'loaded' || p.status === 'changed'));
      streamMetrics(out, labels, stream, snapshot.state.streams[stream.name], runs, partitions.length, nowMs);
    }
  }
  return out.text();
}

function streamMetrics(out: Exposition, labels: Labels, stream: StreamConfig, state: StreamState | undefined, runs: readonly RunRecord[], partitions: number, nowMs: number): void {
  out.set('run_count', labels, state?.runCount ?? runs.length);
  const lastRunAt = seconds(state?.lastRunAt ?? runs[0]?.startedAt);
  out.set('last_run_timestamp_seconds', labels, lastRunAt);
  if (lastRunAt !== undefined) out.set('checked_age_seconds', labels, Math.max(0, nowMs / 1000 - lastRunAt));
  out.set('last_success_timestamp_seconds', labels, seconds(runs.find((r) => r.outcome === 'committed')?.finishedAt));
  const last = runs[0];
  if (last !== undefined) {
    for (const status of RUN_STATUSES) out.set('last_run_status', { ...labels, status }, last.outcome === status ? 1 : 0);
    out.set('last_run_rows_read', labels, last.rowsRead);
    out.set('last_run_rows_loaded', labels, last.rowsLoaded);
    out.set('last_run_rows_rejected', labels, last.rowsRejected);
    const started = seconds(last.startedAt);
    const finished = seconds(last.finishedAt);
    if (started !== undefined && finished !== undefined) out.set('last_run_duration_seconds', labels, Math.max(0, finished - started));
  }
  out.set('rows_loaded', labels, runs.reduce((n, r) => n + r.rowsLoaded, 0));
  if (stream.strategy === 'log') {
    const at = cursorTimeMs(state?.log?.commitTime);
    if (at !== undefined) out.set('cdc_lag_seconds', labels, Math.max(0, (nowMs - at) / 1000));
  } else out.set('freshness_seconds', labels, newestRowAgeSeconds(state?.watermark?.cursor.value, nowMs));
  if (partitions > 0 || stream.strategy === 'partitioned') out.set('partitions_loaded', labels, partitions);
}
