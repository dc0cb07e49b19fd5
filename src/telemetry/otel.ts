/**
 * OpenTelemetry for runs: a span per run, stream and commit, and the metrics of docs/operations.md, exported over
 * OTLP/HTTP as the OTEL_* variables say and/or read by a Prometheus scrape. Loaded only when telemetry is on
 * (telemetry.ts). The providers are this module's own, not the global ones: an application embedding tidemark keeps
 * its own OpenTelemetry set-up untouched.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ROOT_CONTEXT, SpanStatusCode, trace, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider, PeriodicExportingMetricReader, type IMetricReader } from '@opentelemetry/sdk-metrics';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import type { CommitFigures, RunObserver, RunObserverFactory } from '../core/run-observer.js';
import { errorFields, errorMessage } from '../core/errors.js';
import type { RunResult, StreamResult } from '../core/types.js';
import type { OtlpChoice } from './telemetry.js';
import { newestRowAgeSeconds, sourceLagSeconds } from './freshness.js';

export interface OtelTelemetry extends RunObserverFactory {
  readonly prometheusHandler?: (request: IncomingMessage, response: ServerResponse) => void;
  /** The same scrape as text, for a server that adds figures of its own (`tidemark ui`'s state metrics). */
  readonly prometheusText?: () => Promise<string>;
  shutdown(): Promise<void>;
}

/**
 * Seconds: commits take milliseconds to minutes, runs seconds to hours. Names carry their unit, so a Prometheus scrape
 * reads the conventional `_seconds` names (its exporter does not append units).
 */
const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];

export function startOtel(options: { readonly otlp: OtlpChoice; readonly prometheus: boolean }): OtelTelemetry {
  const resource = resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME ?? 'tidemark' }).merge(detectResources({ detectors: [envDetector] }));
  const prometheus = options.prometheus ? new PrometheusExporter({ preventServerStart: true }) : undefined;
  const readers: IMetricReader[] = [];
  if (prometheus) readers.push(prometheus);
  if (options.otlp.metrics) readers.push(new PeriodicExportingMetricReader({ exporter: new OTLPMetricExporter(), exportIntervalMillis: exportInterval() }));
  const meters = new MeterProvider({ resource, readers });
  const tracers = options.otlp.traces ? new TracerProvider({ resource, spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter() })] }) : undefined;
  const instruments = new Instruments(meters);
  const tracer = tracers?.getTracer('tidemark');
  return {
    ...(prometheus
      ? {
          prometheusHandler: (request, response) => prometheus.getMetricsRequestHandler(request, response),
          prometheusText: async () => new PrometheusSerializer().serialize((await prometheus.collect()).resourceMetrics),
        }
      : {}),
    runStarted: (pipeline, runId) => new OtelRun(pipeline, runId, instruments, tracer),
    async shutdown() {
      await Promise.all([meters.shutdown(), tracers?.shutdown()]);
    },
  };
}

/** OTEL_METRIC_EXPORT_INTERVAL (ms, default 60 s); a short CLI run still exports once, at shutdown. */
function exportInterval(): number {
  const ms = Number(process.env.OTEL_METRIC_EXPORT_INTERVAL);
  return Number.isFinite(ms) && ms > 0 ? ms : 60_000;
}

class Instruments {
  readonly rowsRead;
  readonly rowsLoaded;
  readonly rowsRejected;
  readonly commits;
  readonly commitDuration;
  readonly runDuration;
  readonly runs;
  readonly streams;
  readonly newestRowAge;
  readonly lastSuccess;
  readonly cdcLag;

  constructor(provider: MeterProvider) {
    const meter = provider.getMeter('tidemark');
    const seconds = { unit: 's', advice: { explicitBucketBoundaries: SECONDS_BUCKETS } };
    this.rowsRead = meter.createCounter('tidemark.rows.read', { description: 'Rows read from the source and committed' });
    this.rowsLoaded = meter.createCounter('tidemark.rows.loaded', { description: 'Rows loaded into the destination and committed' });
    this.rowsRejected = meter.createCounter('tidemark.rows.rejected', { description: 'Rows the destination could not hold, kept in _tidemark_rejects' });
    this.commits = meter.createCounter('tidemark.commits', { description: 'Load transactions committed' });
    this.commitDuration = meter.createHistogram('tidemark.commit.duration_seconds', { description: 'Time a commit of data and state took', ...seconds });
    this.runDuration = meter.createHistogram('tidemark.run.duration_seconds', { description: 'Time a run took, lease to release', ...seconds });
    this.runs = meter.createCounter('tidemark.runs', { description: 'Runs finished, by outcome (committed, failed)' });
    this.streams = meter.createCounter('tidemark.streams', { description: 'Stream loads finished, by outcome' });
    this.newestRowAge = meter.createGauge('tidemark.freshness_seconds', { unit: 's', description: 'Age of the newest cursor value a stream has loaded, when its cursor is a time' });
    this.lastSuccess = meter.createGauge('tidemark.last_success_timestamp_seconds', { unit: 's', description: 'Unix time of the stream’s last committed load' });
    this.cdcLag = meter.createGauge('tidemark.cdc.lag_seconds', { unit: 's', description: 'Log streams: now minus the source commit time of the newest change applied' });
  }
}

class OtelRun implements RunObserver {
  private readonly started = performance.now();
  private readonly span: Span | undefined;
  private readonly streamSpans = new Map<string, Span>();

  constructor(
    private readonly pipeline: string,
    runId: string,
    private readonly m: Instruments,
    private readonly tracer: Tracer | undefined,
  ) {
    this.span = tracer?.startSpan('tidemark.run', { attributes: { 'tidemark.pipeline': pipeline, 'tidemark.run_id': runId } });
  }

  streamStarted(stream: string, strategy: string): void {
    if (!this.tracer || !this.span) return;
    // Spans are parented explicitly, never through an active-context manager the embedding application may own.
    const parent = trace.setSpan(ROOT_CONTEXT, this.span);
    this.streamSpans.set(stream, this.tracer.startSpan('tidemark.stream', { attributes: { 'tidemark.pipeline': this.pipeline, 'tidemark.stream': stream, 'tidemark.strategy': strategy } }, parent));
  }

  committed(c: CommitFigures): void {
    const labels = { pipeline: this.pipeline, stream: c.stream };
    this.m.commits.add(1, labels);
    this.m.commitDuration.record(c.durationMs / 1000, labels);
    const parent = this.streamSpans.get(c.stream) ?? this.span;
    if (!this.tracer || !parent) return;
    const span = this.tracer.startSpan(
      'tidemark.commit',
      {
        startTime: c.startedAtMs,
        attributes: {
          'tidemark.pipeline': this.pipeline,
          'tidemark.stream': c.stream,
          'tidemark.rows_read': c.rowsRead,
          'tidemark.rows_loaded': c.rowsLoaded,
          'tidemark.rows_rejected': c.rowsRejected,
          'tidemark.bytes': c.bytes,
          'tidemark.partitions': [...c.partitions],
        },
      },
      trace.setSpan(ROOT_CONTEXT, parent),
    );
    span.end(c.startedAtMs + c.durationMs);
  }

  streamFinished(result: StreamResult, strategy: string): void {
    const labels = { pipeline: this.pipeline, stream: result.stream };
    this.m.rowsRead.add(result.rowsRead, labels);
    this.m.rowsLoaded.add(result.rowsLoaded, labels);
    this.m.rowsRejected.add(result.rowsRejected, labels);
    this.m.streams.add(1, { ...labels, outcome: result.outcome });
    if (result.outcome === 'committed') this.m.lastSuccess.record(Date.now() / 1000, labels);
    const age = strategy === 'log' ? undefined : newestRowAgeSeconds(result.watermark?.cursor.value ?? result.cursorMax);
    if (age !== undefined) this.m.newestRowAge.record(age, labels);
    const lag = sourceLagSeconds(result.logCommitTime);
    if (lag !== undefined) this.m.cdcLag.record(lag, labels);
    const span = this.streamSpans.get(result.stream);
    if (!span) return;
    this.streamSpans.delete(result.stream);
    span.setAttributes({ ...resultAttributes(result), 'tidemark.partitions': [...(result.partitionsLoaded ?? [])] });
    if (result.outcome !== 'committed') span.setStatus({ code: SpanStatusCode.ERROR, message: result.error ?? result.outcome });
    span.end();
  }

  runFinished(result: RunResult | undefined, error?: unknown): void {
    const outcome = result === undefined ? 'failed' : result.ok ? 'committed' : 'failed';
    const labels = { pipeline: this.pipeline, outcome };
    this.m.runs.add(1, labels);
    this.m.runDuration.record((performance.now() - this.started) / 1000, labels);
    if (!this.span) return;
    for (const open of this.streamSpans.values()) open.end();
    if (result) this.span.setAttributes(runAttributes(result));
    if (outcome === 'failed') {
      const failed = result?.streams.filter((s) => s.outcome !== 'committed').map((s) => `${s.stream}: ${s.error ?? s.outcome}`).join('; ');
      this.span.setStatus({ code: SpanStatusCode.ERROR, message: error !== undefined ? errorMessage(error) : failed });
      if (error !== undefined) this.span.setAttribute('tidemark.error_kind', errorFields(error).error_kind ?? 'unknown');
    }
    this.span.end();
  }
}

function resultAttributes(r: StreamResult): Attributes {
  return {
    'tidemark.outcome': r.outcome,
    'tidemark.rows_read': r.rowsRead,
    'tidemark.rows_loaded': r.rowsLoaded,
    'tidemark.rows_rejected': r.rowsRejected,
    'tidemark.commits': r.commits,
    ...(r.errorKind !== undefined ? { 'tidemark.error_kind': r.errorKind } : {}),
  };
}

function runAttributes(r: RunResult): Attributes {
  const sum = (pick: (s: StreamResult) => number) => r.streams.reduce((n, s) => n + pick(s), 0);
  return {
    'tidemark.streams': r.streams.length,
    'tidemark.rows_read': sum((s) => s.rowsRead),
    'tidemark.rows_loaded': sum((s) => s.rowsLoaded),
    'tidemark.rows_rejected': sum((s) => s.rowsRejected),
  };
}
