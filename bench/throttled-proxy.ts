/**
 * A TCP proxy that limits what the server sends to each connection to a fixed rate, as a remote database behind a
 * WAN link behaves: one connection cannot go faster than the link, several connections each get their own.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface ThrottledProxy {
  readonly port: number;
  close(): Promise<void>;
}

export async function startThrottledProxy(target: { host: string; port: number }, bytesPerSecond: number): Promise<ThrottledProxy> {
  const open = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    open.add(client).add(upstream);
    const started = Date.now();
    let sent = 0;
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      sent += chunk.length;
      client.write(chunk);
      // The byte budget so far is rate × elapsed time; when ahead of it, wait until the link would have caught up.
      const ahead = (sent / bytesPerSecond) * 1000 - (Date.now() - started);
      if (ahead > 0) {
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
