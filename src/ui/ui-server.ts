/**
 * `tidemark ui`: a small HTTP server on loopback serving one static page and a JSON API over the library.
 *
 * Safety, in order of the threats: it binds 127.0.0.1 unless told otherwise; it answers only requests whose Host
 * header names the address it serves (a DNS-rebinding page cannot read state); it is read-only unless started with
 * `allowActions`, and then every action is a POST carrying a per-process token that only the served page knows,
 * with a JSON body (a cross-site form cannot send either). Values from state, data and errors leave here as JSON and
 * the page renders them as text only; the Content-Security-Policy forbids inline scripts as a second line.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { TidemarkError, errorMessage, planPipeline, redact, type RunRecord, type StreamConfig } from '../index.js';
import { DashboardReader, DestinationGate, RUNS_PER_STREAM, destinationKey, lagMs, nextScheduledRun, runDurationMs, type PipelineView } from './dashboard-data.js';
import { readRunLogs } from '../engine/run-journal.js';
import { schemaVersions } from '../core/schema-diff.js';
import { PARTITION_STATUSES, libraryLedgerView, type LedgerPartition, type LedgerView } from './ledger-view.js';
import { ledgerActions, performAction, type ActionName } from './ui-actions.js';
import { stateMetricsText } from './state-metrics.js';

export interface DashboardOptions {
  /** Pipeline files and directories of pipeline files. */
  readonly inputs: readonly string[];
  /** 0 picks a free port. Default 4680. */
  readonly port?: number;
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** A non-loopback host is refused unless the user asked for it explicitly (`--host`). */
  readonly allowNonLoopback?: boolean;
  /** Run now, reset, ledger reload/forget; without it the server is read-only. */
  readonly allowActions?: boolean;
  /** How long a read waits for a destination file another process holds before showing the last known data. */
  readonly openTimeoutMs?: number;
  /** The ledger behind the grid; defaults to reading `_tidemark_ledger` rows. */
  readonly ledger?: LedgerView;
  /**
   * Evaluated at each scrape of `GET /metrics`: exposition text of the runs this process performs (the OpenTelemetry
   * Prometheus reader). The `tidemark_state_*` gauges of every pipeline's state (src/ui/state-metrics.ts) follow it,
   * with or without this option.
   */
  readonly metrics?: () => Promise<string>;
}

export interface Dashboard {
  readonly url: string;
  readonly port: number;
  readonly host: string;
  close(): Promise<void>;
}

export const DEFAULT_PORT = 4680;
const MAX_BODY = 64 * 1024;

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** The page and its script live beside this module in src/, and are found from dist/ too (tsc copies no assets). */
function staticDir(): string {
  const candidates = [new URL('./static/', import.meta.url), new URL('../../src/ui/static/', import.meta.url)].map((u) => fileURLToPath(u));
  const found = candidates.find((dir) => existsSync(`${dir}index.html`));
  if (!found) throw new TidemarkError('usage', `the dashboard's page is missing (looked in ${candidates.join(', ')})`);
  return found;
}

const require = createRequire(import.meta.url);

const ASSETS: Readonly<Record<string, { readonly file: () => string; readonly type: string }>> = {
  '/app.js': { file: () => `${staticDir()}app.js`, type: 'text/javascript; charset=utf-8' },
  '/app.css': { file: () => `${staticDir()}app.css`, type: 'text/css; charset=utf-8' },
  '/vendor/uPlot.iife.min.js': { file: () => require.resolve('uplot/dist/uPlot.iife.min.js'), type: 'text/javascript; charset=utf-8' },
  '/vendor/uPlot.min.css': { file: () => require.resolve('uplot/dist/uPlot.min.css'), type: 'text/css; charset=utf-8' },
};

const SECURITY_HEADERS = {
  'Content-Security-Policy':
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  'Cache-Control': 'no-store',
} as const;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** JSON that keeps bigints exact and never carries a secret resolved from `${env:…}`. */
function json(value: unknown): string {
  return redact(JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)));
}

function streamSummary(view: PipelineView, stream: StreamConfig) {
  const s = view.snapshot?.state.streams[stream.name];
  const runs = view.snapshot?.runs.filter((r) => r.stream === stream.name) ?? [];
  const last = runs[0];
  const ledger = view.snapshot?.ledger.filter((p) => p.stream === stream.name) ?? [];
  const counts: Record<string, number> = {};
  for (const p of ledger) counts[p.status] = (counts[p.status] ?? 0) + 1;
  return {
    name: stream.name,
    strategy: stream.strategy,
    write: stream.write,
    cursor: stream.cursor ?? null,
    primaryKey: stream.primaryKey,
    watermark: s?.watermark ?? null,
    safeMark: s?.safeMark ?? null,
    // The last `tidemark verify` of the stream (a badge beside its name), null when never verified.
    lastVerify: s?.lastVerify ?? null,
    lagMs: lagMs(s?.watermark),
    // Freshness in two honest figures: when a run last asked the source (a run that found nothing new counts), and
    // how old the newest loaded row is (an up-to-date table whose newest row is old is not late).
    checkedAt: s?.lastRunAt ?? null,
    live: view.live?.streams[stream.name] ?? null,
    schema: s?.schema ?? null,
    generation: s?.generation ?? null,
    building: s?.build ? { generation: s.build.generation, rows: s.build.rows } : null,
    updatedAt: s?.updatedAt ?? null,
    lastRun: last ? runView(last) : null,
    // `strategy: partitioned` arrives with the ledger (issue 4); a stream with ledger rows is partitioned either way.
    partitioned: (stream.strategy as string) === 'partitioned' || ledger.length > 0,
    ledgerCounts: counts,
    partitions: partitionsLoaded(ledger),
  };
}

/** A partitioned stream's position: how many partitions hold loaded rows, the newest of them, and when it loaded. */
function partitionsLoaded(ledger: readonly LedgerPartition[]): { loaded: number; latest: string | null; latestLoadedAt: string | null } {
  // `changed` partitions were loaded too (their source moved since); `missing` and `failed` ones hold nothing.
  const loaded = ledger.filter((p) => p.status === 'loaded' || p.status === 'changed');
  const latest = loaded.reduce<LedgerPartition | undefined>((a, p) => (a === undefined || p.partition > a.partition ? p : a), undefined);
  const times = loaded.map((p) => p.loadedAt).filter((t): t is string => t !== null);
  return { loaded: loaded.length, latest: latest?.partition ?? null, latestLoadedAt: times.length ? times.reduce((a, t) => (t > a ? t : a)) : null };
}

function runView(r: RunRecord) {
  return { ...r, durationMs: runDurationMs(r) };
}

function pipelineSummary(view: PipelineView) {
  return {
    name: view.name,
    file: view.file,
    error: view.error,
    stale: view.stale,
    warnings: view.warnings,
    lock: view.lock,
    readAt: view.snapshot?.readAt ?? null,
    stateVersion: view.snapshot?.state.version ?? null,
    live: view.live,
    nextRun: view.config ? nextScheduledRun(view.config) : null,
    streams: view.config ? view.config.streams.map((s) => streamSummary(view, s)) : [],
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY) {
        reject(new HttpError(413, 'request body too large'));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function sameToken(given: string | undefined, token: string): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

const ACTION_PATHS: Readonly<Record<string, ActionName>> = {
  run: 'run',
  reset: 'reset',
  'ledger/reload': 'ledger-reload',
  'ledger/forget': 'ledger-forget',
};

export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const host = options.host ?? '127.0.0.1';
  if (!isLoopback(host) && options.allowNonLoopback !== true) {
    throw new TidemarkError('usage', `refusing to serve on ${host}: not a loopback address (pass --host ${host} explicitly to allow it)`);
  }
  const pageDir = staticDir();
  const ledger = options.ledger ?? libraryLedgerView();
  const gate = new DestinationGate();
  const reader = new DashboardReader({ inputs: options.inputs, ledger, openTimeoutMs: options.openTimeoutMs ?? 250, maxAgeMs: 1000, gate });
  const token = randomBytes(24).toString('hex');
  const allowActions = options.allowActions === true;
  let allowedHosts = new Set<string>();

  async function pipelineOr404(name: string) {
    const view = await reader.one(name);
    if (!view?.config) throw new HttpError(404, `no pipeline ${name}`);
    return { view, config: view.config };
  }

  async function getApi(path: string, query: URLSearchParams): Promise<unknown> {
    if (path === '/api/overview') {
      const views = await reader.all();
      return { generatedAt: new Date().toISOString(), actions: allowActions, pipelines: views.map(pipelineSummary) };
    }
    const m = /^\/api\/pipelines\/([^/]+)(\/plan|\/ledger\/verify)?$/.exec(path);
    if (!m) throw new HttpError(404, 'not found');
    const { view, config } = await pipelineOr404(decodeURIComponent(m[1]!));
    if (m[2] === undefined) {
      const snap = view.snapshot;
      return {
        ...pipelineSummary(view),
        actions: allowActions ? ['run', 'reset', ...ledgerActions(ledger)] : [],
        canVerifyLedger: ledger.verify !== undefined,
        partitionStatuses: PARTITION_STATUSES,
        runsPerStream: RUNS_PER_STREAM,
        state: snap?.state ?? null,
        history: snap?.history ?? [],
        runs: snap?.runs.map(runView) ?? [],
        runLogs: readRunLogs(config.name, snap?.runs.map((r) => r.runId) ?? []),
        schemaVersions: schemaVersions(snap?.history ?? []),
        rejects: snap?.rejects ?? [],
        ledger: snap?.ledger ?? [],
      };
    }
    if (m[2] === '/plan') {
      const stream = query.get('stream');
      if (view.lock?.live) return { available: false, reason: 'the pipeline is running; its plan is computed once the run ends' };
      const result = await gate.tryRead(destinationKey(config), () =>
        planPipeline(config, { ...(stream ? { streams: [stream] } : {}), openTimeoutMs: options.openTimeoutMs ?? 250 }),
      );
      if ('busy' in result) return { available: false, reason: `${result.busy} is in progress` };
      return { available: true, reports: result.value };
    }
    if (!ledger.verify) return { available: false, reason: 'ledger verify is not available in this build yet' };
    const verify = ledger.verify.bind(ledger);
    const result = await gate.tryRead(destinationKey(config), () => verify(config, { openTimeoutMs: options.openTimeoutMs ?? 250 }));
    if ('busy' in result) return { available: false, reason: `${result.busy} is in progress` };
    return { available: true, report: result.value };
  }

  async function postApi(path: string, req: IncomingMessage): Promise<unknown> {
    if (!allowActions) throw new HttpError(403, 'this dashboard is read-only (start it with --allow-actions to enable actions)');
    if (!sameToken(req.headers['x-tidemark-token'] as string | undefined, token)) throw new HttpError(403, 'missing or wrong action token; reload the page');
    if (!/^application\/json\b/i.test(req.headers['content-type'] ?? '')) throw new HttpError(415, 'actions take a JSON body');
    const m = /^\/api\/pipelines\/([^/]+)\/(run|reset|ledger\/reload|ledger\/forget)$/.exec(path);
    if (!m) throw new HttpError(404, 'not found');
    const action = ACTION_PATHS[m[2]!]!;
    let body: { stream?: unknown; partition?: unknown };
    try {
      body = JSON.parse((await readBody(req)) || '{}') as typeof body;
    } catch {
      throw new HttpError(400, 'the body is not valid JSON');
    }
    const { config } = await pipelineOr404(decodeURIComponent(m[1]!));
    try {
      return await performAction(gate, ledger, config, action, {
        ...(typeof body.stream === 'string' ? { stream: body.stream } : {}),
        ...(typeof body.partition === 'string' ? { partition: body.partition } : {}),
      });
    } finally {
      reader.invalidate(config.name);
    }
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const send = (status: number, type: string, body: string | Buffer) => {
      res.writeHead(status, { ...SECURITY_HEADERS, 'Content-Type': type });
      res.end(body);
    };
    try {
      // DNS rebinding: a hostile page whose name resolves here would send its own name as Host.
      if (!allowedHosts.has('*') && !allowedHosts.has((req.headers.host ?? '').toLowerCase())) throw new HttpError(421, 'unexpected Host header');
      const origin = req.headers.origin;
      if (req.method === 'POST' && origin !== undefined) {
        const originHost = (() => {
          try {
            return new URL(origin).host.toLowerCase();
          } catch {
            return '';
          }
        })();
        if (!allowedHosts.has('*') ? !allowedHosts.has(originHost) : originHost !== (req.headers.host ?? '').toLowerCase()) {
          throw new HttpError(403, 'cross-origin request refused');
        }
      }
      const url = new URL(req.url ?? '/', 'http://dashboard.invalid');
      if (req.method === 'GET' || req.method === 'HEAD') {
        if (url.pathname === '/' || url.pathname === '/index.html') {
          const page = (await readFile(`${pageDir}index.html`, 'utf8'))
            .replace('{{TOKEN}}', allowActions ? token : '')
            .replace('{{ACTIONS}}', allowActions ? 'on' : 'off');
          return send(200, 'text/html; charset=utf-8', page);
        }
        if (url.pathname === '/metrics') {
          const [runs, views] = await Promise.all([options.metrics?.() ?? '', reader.all()]);
          return send(200, 'text/plain; version=0.0.4; charset=utf-8', `${runs}${runs && !runs.endsWith('\n') ? '\n' : ''}${stateMetricsText(views)}`);
        }
        const asset = ASSETS[url.pathname];
        if (asset) return send(200, asset.type, await readFile(asset.file()));
        if (url.pathname.startsWith('/api/')) return send(200, 'application/json; charset=utf-8', json(await getApi(url.pathname, url.searchParams)));
        throw new HttpError(404, 'not found');
      }
      if (req.method === 'POST' && url.pathname.startsWith('/api/')) {
        return send(200, 'application/json; charset=utf-8', json(await postApi(url.pathname, req)));
      }
      res.setHeader('Allow', 'GET, HEAD, POST');
      throw new HttpError(405, 'method not allowed');
    } catch (error) {
      const status = error instanceof HttpError ? error.status : error instanceof TidemarkError ? (error.kind === 'usage' ? 400 : error.kind === 'conflict' ? 409 : 500) : 500;
      if (!res.headersSent) send(status, 'application/json; charset=utf-8', json({ error: errorMessage(error) }));
      else res.end();
    }
  }

  const server: Server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? DEFAULT_PORT, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  allowedHosts = new Set([`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, `${shownHost.toLowerCase()}:${port}`]);
  // Bound to every interface on request: any name may reach it, which the user chose with --host.
  if (host === '0.0.0.0' || host === '::') allowedHosts.add('*');
  return {
    url: `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : shownHost}:${port}/`,
    port,
    host,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
