/**
 * Bounds on the waits of a source read, on the driver's socket. TCP alone never ends a read whose network stalls
 * (packets dropped, connection open) or whose process is asked to stop while the driver waits for the server:
 *  - a socket that delivers nothing for `readTimeoutMs` while the driver waits for a statement's data is destroyed
 *    with an error that names the server; time when bytes wait unread (the destination is still loading earlier
 *    rows) or no statement runs (the engine is committing) does not count;
 *  - an abort (SIGTERM, SIGINT, SIGHUP) destroys the socket at once, so a read stuck inside the driver ends too.
 * The driver then fails its running statement with that error, and the engine rolls the destination back.
 */
import type { Socket } from 'node:net';

/** The default `read_timeout`: ends a dead connection well under a minute after its last byte. */
export const DEFAULT_READ_TIMEOUT_MS = 30_000;

export class ReadStalledError extends Error {}

export interface ReadGuardOptions {
  /** 0 turns the stall detector off. */
  readonly readTimeoutMs: number;
  readonly signal?: AbortSignal;
  /** The server as messages name it: host, port and database, never a password. */
  readonly server: string;
  /** A statement is running on the connection: the driver expects data from the server. */
  readonly waiting: () => boolean;
}

/**
 * Watches `socket` until the returned function is called. It reads the socket's counters only: a 'data' listener
 * would switch a socket the driver reads in paused mode (pg's COPY) into flowing mode and steal its bytes.
 */
export function guardRead(socket: Socket | undefined, options: ReadGuardOptions): () => void {
  if (socket === undefined) return () => undefined;
  const { readTimeoutMs, signal, server, waiting } = options;
  let lastBytes = socket.bytesRead;
  let lastActive = performance.now();
  const check = (): void => {
    // Bytes arrived, bytes wait unread (the driver holds back while the destination loads), or nothing is asked.
    if (socket.bytesRead !== lastBytes || socket.readableLength > 0 || !waiting()) {
      lastBytes = socket.bytesRead;
      lastActive = performance.now();
    } else if (performance.now() - lastActive > readTimeoutMs) {
      socket.destroy(new ReadStalledError(`no data from ${server} for ${formatSeconds(readTimeoutMs)} while reading (read_timeout; a query the server computes longer before its first row, such as a sort of a large table without an index, needs a larger read_timeout)`));
    }
  };
  const timer = readTimeoutMs > 0 ? setInterval(check, Math.min(1000, Math.max(50, readTimeoutMs / 4))) : undefined;
  timer?.unref();
  const onAbort = (): void => {
    socket.destroy(new Error(`read from ${server} stopped: ${reasonOf(signal)}`));
  };
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  return () => {
    if (timer !== undefined) clearInterval(timer);
    signal?.removeEventListener('abort', onAbort);
  };
}

function formatSeconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}

function reasonOf(signal: AbortSignal | undefined): string {
  const reason: unknown = signal?.reason;
  return reason instanceof Error ? reason.message : String(reason ?? 'aborted');
}
