/**
 * The process's telemetry: off unless the standard OTEL_* variables ask for an OTLP export, or a long-running command
 * serves Prometheus `/metrics`. The OpenTelemetry SDK (bundled into the CLI, see scripts/bundle.mjs) is initialised
 * only then, so a run without either pays one environment look-up.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RunObserverFactory } from '../core/run-observer.js';
import type { OtelTelemetry } from './otel.js';

/** Which signals go out over OTLP, read from the standard variables (OTEL_SDK_DISABLED=true wins). */
export interface OtlpChoice {
  readonly traces: boolean;
  readonly metrics: boolean;
}

export function otlpChoice(env: NodeJS.ProcessEnv = process.env): OtlpChoice {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return { traces: false, metrics: false };
  const shared = nonEmpty(env.OTEL_EXPORTER_OTLP_ENDPOINT);
  const wanted = (signal: 'TRACES' | 'METRICS') => {
    const exporter = env[`OTEL_${signal}_EXPORTER`]?.trim().toLowerCase();
    if (exporter === 'none') return false;
    return shared || nonEmpty(env[`OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`]) || exporter === 'otlp';
  };
  return { traces: wanted('TRACES'), metrics: wanted('METRICS') };
}

function nonEmpty(value: string | undefined): boolean {
  return value !== undefined && value.trim() !== '';
}

let prometheus = false;
let loaded: Promise<OtelTelemetry> | undefined;

/** A long-running command serves `/metrics`: call before the first run, so its figures are counted. */
export async function enablePrometheus(): Promise<(request: IncomingMessage, response: ServerResponse) => void> {
  if (loaded !== undefined && !prometheus) throw new Error('enablePrometheus: telemetry was already set up without a Prometheus reader');
  prometheus = true;
  return (await sdk()).prometheusHandler!;
}

/** As `enablePrometheus`, for a server that writes the scrape itself: the run metrics as exposition text. */
export async function enablePrometheusText(): Promise<() => Promise<string>> {
  await enablePrometheus();
  return (await sdk()).prometheusText!;
}

/** The observer factory runs report to, or undefined when telemetry is off. */
export async function runTelemetry(): Promise<RunObserverFactory | undefined> {
  if (loaded === undefined) {
    const choice = otlpChoice();
    if (!choice.traces && !choice.metrics && !prometheus) return undefined;
  }
  return sdk();
}

function sdk(): Promise<OtelTelemetry> {
  loaded ??= import('./otel.js').then((m) => m.startOtel({ otlp: otlpChoice(), prometheus }));
  return loaded;
}

/** Exports what is buffered and stops the exporters; a no-op when telemetry never started. */
export async function shutdownTelemetry(): Promise<void> {
  const started = loaded;
  loaded = undefined;
  prometheus = false;
  if (started !== undefined) await (await started).shutdown();
}
