/**
 * A TCP proxy in front of the test Postgres that records the SQL every client sends through it (simple `Query` and
 * extended `Parse` messages of the wire protocol), so a test can say which statements a source sent — a whole-table
 * `max()`, a snapshot export — without touching the code under test. Bytes pass through unchanged.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface StatementRecorder {
  readonly port: number;
  /** Statements sent since the last `clear`, in arrival order. */
  statements(): readonly string[];
  clear(): void;
  close(): Promise<void>;
}

/** The protocol codes of requests sent before the startup message (SSL, GSS encryption): no type byte either. */
const PRE_STARTUP = new Set([80877103, 80877104]);

export async function startStatementRecorder(target: { host: string; port: number }): Promise<StatementRecorder> {
  let recorded: string[] = [];
  const open = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    open.add(client).add(upstream);
    let pending = Buffer.alloc(0);
    let started = false;
    client.on('data', (data: Buffer) => {
      upstream.write(data);
      pending = Buffer.concat([pending, data]);
      for (;;) {
        if (!started) {
          if (pending.length < 8) return;
          const length = pending.readInt32BE(0);
          if (pending.length < length) return;
          started = !PRE_STARTUP.has(pending.readInt32BE(4));
          pending = pending.subarray(length);
          continue;
        }
        if (pending.length < 5) return;
        const length = pending.readInt32BE(1);
        if (pending.length < 1 + length) return;
        const type = String.fromCharCode(pending[0]!);
        const body = pending.subarray(5, 1 + length);
        if (type === 'Q') recorded.push(cstring(body, 0).text);
        else if (type === 'P') recorded.push(cstring(body, cstring(body, 0).end + 1).text);
        pending = pending.subarray(1 + length);
      }
    });
    upstream.pipe(client);
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
  if (address === null || typeof address === 'string') throw new Error('recorder has no port');
  return {
    port: address.port,
    statements: () => recorded,
    clear: () => {
      recorded = [];
    },
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function cstring(buffer: Buffer, from: number): { text: string; end: number } {
  const end = buffer.indexOf(0, from);
  return { text: buffer.subarray(from, end < 0 ? buffer.length : end).toString('utf8'), end: end < 0 ? buffer.length : end };
}
