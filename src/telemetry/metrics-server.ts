/**
 * `--metrics-port` of `worker` and `schedule`: a Prometheus scrape endpoint, `GET /metrics` in the text exposition
 * format, for the runs this process performs. Loopback unless `--metrics-host` says otherwise.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { enablePrometheus } from './telemetry.js';

export interface MetricsServer {
  readonly url: string;
  close(): Promise<void>;
}

export async function serveMetrics(port: number, host = '127.0.0.1'): Promise<MetricsServer> {
  const metrics = await enablePrometheus();
  const server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://metrics.invalid').pathname;
    if ((request.method === 'GET' || request.method === 'HEAD') && path === '/metrics') return metrics(request, response);
    response.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' });
    response.end('not found: metrics are at /metrics\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${bound}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
