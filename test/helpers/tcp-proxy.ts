/**
 * A TCP proxy in the test process, between tidemark and a real server, that can cut every connection (a network
 * failure the client learns of) or stall them (packets dropped, connections left open: the client learns nothing).
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** Connections opened through the proxy so far. */
  readonly opened: () => number;
  /** Resolves once the server has sent this many bytes to clients, in total. */
  readonly served: (bytes: number) => Promise<void>;
  /** Resets every open connection; new ones still pass. */
  cut(): void;
  /** Stops forwarding in both directions and accepts new connections without forwarding them. */
  stall(): void;
  /**
   * Stalls each connection, from then on, whose client sends bytes containing `text` (a query of that text: the
   * packet carrying it is held, so the server never sees it); other connections keep passing.
   */
  stallOn(text: string): void;
  /** Connections stalled by `stallOn` so far. */
  readonly stalledOn: () => number;
  close(): Promise<void>;
}

interface Pair {
  readonly client: Socket;
  readonly server: Socket;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<Pair>();
  let stalled = false;
  let trigger: Buffer | undefined;
  let stalledOn = 0;
  let opened = 0;
  let servedBytes = 0;
  const waiting: { bytes: number; resolve: () => void }[] = [];
  const count = (bytes: number): void => {
    servedBytes += bytes;
    for (const w of waiting.filter((w) => w.bytes <= servedBytes)) {
      waiting.splice(waiting.indexOf(w), 1);
      w.resolve();
    }
  };
  const server: Server = createServer((client) => {
    opened += 1;
    client.on('error', () => undefined);
    if (stalled) return; // held open, never answered
    const upstream = connect(target.port, target.host);
    upstream.on('error', () => client.destroy());
    const pair = { client, server: upstream };
    pairs.add(pair);
    // The client's last bytes, so that a text split across two packets is still seen.
    let tail = Buffer.alloc(0);
    let held = false;
    const forward = (from: Socket, to: Socket) =>
      from.on('data', (chunk: Buffer) => {
        if (stalled || held) return;
        if (from === client && trigger !== undefined) {
          const seen = Buffer.concat([tail, chunk]);
          if (seen.includes(trigger)) {
            held = true;
            stalledOn += 1;
            return;
          }
          tail = seen.subarray(Math.max(0, seen.length - trigger.length));
        }
        to.write(chunk);
        if (from === upstream) count(chunk.length);
      });
    forward(client, upstream);
    forward(upstream, client);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', drop);
    upstream.on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('proxy: no port');
  const held = new Set<Socket>();
  server.on('connection', (socket) => {
    held.add(socket);
    socket.on('close', () => held.delete(socket));
  });
  return {
    port: address.port,
    opened: () => opened,
    served: (bytes) => (bytes <= servedBytes ? Promise.resolve() : new Promise((resolve) => waiting.push({ bytes, resolve }))),
    cut() {
      for (const { client, server: upstream } of pairs) {
        client.resetAndDestroy();
        upstream.destroy();
      }
      pairs.clear();
    },
    stall() {
      stalled = true;
    },
    stallOn(text) {
      trigger = Buffer.from(text, 'utf8');
    },
    stalledOn: () => stalledOn,
    async close() {
      for (const socket of held) socket.destroy();
      for (const { client, server: upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
