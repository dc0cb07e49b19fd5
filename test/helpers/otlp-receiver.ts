/**
 * A small OTLP/HTTP receiver for tests: takes the JSON bodies tidemark's exporters POST to /v1/traces and
 * /v1/metrics and flattens them into spans and metric points.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

type AnyValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean; arrayValue?: { values?: AnyValue[] } };
interface KeyValue {
  key: string;
  value: AnyValue;
}

export interface ReceivedSpan {
  readonly name: string;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly attributes: Record<string, unknown>;
  readonly status: { code?: number; message?: string };
  readonly startNs: bigint;
  readonly endNs: bigint;
  readonly service: unknown;
}

export interface ReceivedPoint {
  readonly metric: string;
  readonly unit: string;
  readonly attributes: Record<string, unknown>;
  /** Sum and gauge points: the value; histograms: the sum of observations. */
  readonly value: number;
  /** Histograms: the number of observations. */
  readonly count?: number;
}

export interface OtlpReceiver {
  readonly endpoint: string;
  readonly spans: ReceivedSpan[];
  readonly points: ReceivedPoint[];
  /** Requests answered, by path. */
  readonly requests: string[];
  close(): Promise<void>;
}

function plain(v: AnyValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(plain);
  return undefined;
}

function attributes(list: readonly KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, plain(kv.value)]));
}

/** OTLP/JSON ids are hex strings; some exporters send base64. */
function hexId(id: string | undefined): string {
  if (!id) return '';
  return /^[0-9a-f]+$/i.test(id) ? id.toLowerCase() : Buffer.from(id, 'base64').toString('hex');
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const points: ReceivedPoint[] = [];
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      requests.push(req.url ?? '');
      try {
        if (!/json/.test(req.headers['content-type'] ?? '')) throw new Error(`expected OTLP/JSON, got ${req.headers['content-type']}`);
        if (req.url === '/v1/traces') collectSpans(JSON.parse(body) as TraceRequest, spans);
        else if (req.url === '/v1/metrics') collectPoints(JSON.parse(body) as MetricsRequest, points);
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end('{}');
      } catch (error) {
        res.writeHead(400);
        res.end(String(error));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    points,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The parts of OTLP/JSON export requests that the tests read. */
interface TraceRequest {
  resourceSpans?: {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: {
      spans?: { name: string; traceId?: string; spanId?: string; parentSpanId?: string; attributes?: KeyValue[]; status?: ReceivedSpan['status']; startTimeUnixNano: string; endTimeUnixNano: string }[];
    }[];
  }[];
}
interface NumberPoint {
  attributes?: KeyValue[];
  asDouble?: number;
  asInt?: string | number;
}
interface MetricsRequest {
  resourceMetrics?: {
    scopeMetrics?: {
      metrics?: { name: string; unit?: string; sum?: { dataPoints?: NumberPoint[] }; gauge?: { dataPoints?: NumberPoint[] }; histogram?: { dataPoints?: { attributes?: KeyValue[]; sum?: number; count: string | number }[] } }[];
    }[];
  }[];
}

function collectSpans(doc: TraceRequest, out: ReceivedSpan[]): void {
  for (const rs of doc.resourceSpans ?? []) {
    const service = attributes(rs.resource?.attributes)['service.name'];
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          name: s.name,
          traceId: hexId(s.traceId),
          spanId: hexId(s.spanId),
          parentSpanId: hexId(s.parentSpanId),
          attributes: attributes(s.attributes),
          status: s.status ?? {},
          startNs: BigInt(s.startTimeUnixNano),
          endNs: BigInt(s.endTimeUnixNano),
          service,
        });
      }
    }
  }
}

function collectPoints(doc: MetricsRequest, out: ReceivedPoint[]): void {
  for (const rm of doc.resourceMetrics ?? []) {
    for (const sm of rm.scopeMetrics ?? []) {
      for (const m of sm.metrics ?? []) {
        for (const p of (m.sum ?? m.gauge)?.dataPoints ?? []) {
          out.push({ metric: m.name, unit: m.unit ?? '', attributes: attributes(p.attributes), value: Number(p.asDouble ?? p.asInt ?? 0) });
        }
        for (const p of m.histogram?.dataPoints ?? []) {
          out.push({ metric: m.name, unit: m.unit ?? '', attributes: attributes(p.attributes), value: Number(p.sum ?? 0), count: Number(p.count) });
        }
      }
    }
  }
}
