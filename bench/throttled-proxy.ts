/**
 * A TCP proxy that limits what the server sends to each connection to a fixed rate, as a remote database behind a
 * WAN link behaves: one connection cannot go faster than the link, several connections each get their own. A link
 * saves (almost) nothing up while it is idle: a connection that sat idle (a reader waiting for its writer, a job's
 * other work) may then send at most `BURST_MS` of its rate at once, enough to make up for a timer that fired late on a
 * busy machine. (The budget used to be rate x time since the connection opened: a parallel: 4 reader that waited
 * ~1 s for the DuckDB writer then read ~4 MB, most of its next range, at once; parallel: 4 took 3.52-3.89 s through it
 * and 4.15-4.70 s through this, parallel: 1 10.76 and 11.11 s, load average ~5.)
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

/** What an idle connection may send at once, in milliseconds of its rate. */
const BURST_MS = 50;

export interface ThrottledProxy {
  readonly port: number;
  close(): Promise<void>;
}

export async function startThrottledProxy(target: { host: string; port: number }, bytesPerSecond: number): Promise<ThrottledProxy> {
  const open = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    open.add(client).add(upstream);
    /** When the link is done sending what it was given so far (ms, performance.now()). */
    let busyUntil = 0;
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      const now = performance.now();
      busyUntil = Math.max(busyUntil, now - BURST_MS) + (chunk.length / bytesPerSecond) * 1000;
      client.write(chunk);
      // Nothing more is read from the server until the link would have sent this chunk.
      const ahead = busyUntil - now;
      if (ahead > 1) {
        upstream.pause();
        setTimeout(() => upstream.resume(), ahead);
      }
    });
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    for (const s of [client, upstream]) {
      s.on('error', drop);
      s.on('close', drop);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('proxy has no port');
  return {
    port: address.port,
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
