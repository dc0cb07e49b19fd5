/**
 * Bounds on the waits of a source connection, on the driver's socket. TCP alone never ends a statement whose network
 * stalls (packets dropped, connection open) or whose process is asked to stop while the driver waits for the server:
 *  - a socket that delivers nothing for `readTimeoutMs` while the driver waits for an answer (the handshake, a
 *    planning query, a streamed read) is destroyed with an error that names the server; time when bytes wait unread
 *    (the destination is still loading earlier rows) or no statement runs (the engine is committing) does not count;
 *    a source that can ask the server whether it is still computing (`alive`) keeps waiting while it is;
 *  - an abort (SIGTERM, SIGINT, SIGHUP) destroys the socket at once, so a read stuck inside the driver ends too.
 * The driver then fails its running statement with that error, and the engine rolls the destination back.
 */
import type { Socket } from 'node:net';
import { onAbort } from './on-abort.js';

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
  /** What the connection waits for, in the stall message ("reading", "connecting"); "reading" by default. */
  readonly activity?: () => string;
  /**
   * Asked when the stall detector fires, over another connection: true when the server is still working on the
   * statement (a sort before its first row), so the wait goes on for another `readTimeoutMs`; false or a failure
   * (that connection stalls too) ends the stalled one.
   */
  readonly alive?: () => Promise<boolean>;
  /**
   * A connection whose server answers at least every so often while it works (a change log's keepalives) has no
   * slow query to point at: its stall message gives no advice.
   */
  readonly answersWhileWorking?: boolean;
}

/**
 * Watches `socket` until the returned function is called. It reads the socket's counters only: a 'data' listener
 * would switch a socket the driver reads in paused mode (pg's COPY) into flowing mode and steal its bytes.
 */
export function guardRead(socket: Socket | undefined, options: ReadGuardOptions): () => void {
  if (socket === undefined) return () => undefined;
  const { readTimeoutMs, signal, server, waiting, alive } = options;
  let lastBytes = socket.bytesRead;
  let lastActive = performance.now();
  let probing = false;
  const stalled = (): void => {
    const activity = options.activity?.() ?? 'reading';
    const hint = alive === undefined && options.answersWhileWorking !== true ? '; a query the server computes longer before its first row, such as a sort of a large table without an index, needs a larger read_timeout' : '';
    socket.destroy(new ReadStalledError(`no data from ${server} for ${formatSeconds(readTimeoutMs)} while ${activity} (read_timeout${hint})`));
  };
  const check = (): void => {
    if (probing || socket.destroyed) return;
    // Bytes arrived, bytes wait unread (the driver holds back while the destination loads), or nothing is asked.
    if (socket.bytesRead !== lastBytes || socket.readableLength > 0 || !waiting()) {
      lastBytes = socket.bytesRead;
      lastActive = performance.now();
    } else if (performance.now() - lastActive > readTimeoutMs) {
      if (alive === undefined) return stalled();
      probing = true;
      void withTimeout(alive(), readTimeoutMs).then(
        (working) => {
          probing = false;
          if (socket.destroyed) return;
          // The server is computing: the silence is its work, not the network's; wait another read_timeout.
          if (working && socket.bytesRead === lastBytes) lastActive = performance.now();
          else if (!working) stalled();
        },
        () => {
          probing = false;
          if (!socket.destroyed) stalled();
        },
      );
    }
  };
  const timer = readTimeoutMs > 0 ? setInterval(check, Math.min(1000, Math.max(50, readTimeoutMs / 4))) : undefined;
  timer?.unref();
  const unlisten = onAbort(signal, () => socket.destroy(new Error(`read from ${server} stopped: ${reasonOf(signal)}`)));
  return () => {
    if (timer !== undefined) clearInterval(timer);
    unlisten();
  };
}

/**
 * Ends a connection politely (`end`), or by `destroy` when the server has not answered the goodbye within `ms`: a
 * connection over a stalled network never hears it answered.
 */
export async function endOrDestroy(end: () => Promise<unknown>, destroy: () => void, ms = 1000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      destroy();
      resolve();
    }, ms);
  });
  await Promise.race([end().catch(() => undefined), late]);
  clearTimeout(timer);
}

/** `promise`, or a rejection after `ms`: a probe over a stalled network must not wait forever either. */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('probe timed out')), ms);
    timer.unref();
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}

function formatSeconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}

function reasonOf(signal: AbortSignal | undefined): string {
  const reason: unknown = signal?.reason;
  return reason instanceof Error ? reason.message : String(reason ?? 'aborted');
}
