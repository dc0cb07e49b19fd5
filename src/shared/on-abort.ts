/**
 * Calls `stop` when `signal` aborts — at once if it already has: a signal that fired while the caller was still
 * awaiting its set-up (a SIGTERM right after start) has no 'abort' event left to hear. Returns the removal.
 */
export function onAbort(signal: AbortSignal | undefined, stop: () => void): () => void {
  if (signal === undefined) return () => undefined;
  if (signal.aborted) {
    stop();
    return () => undefined;
  }
  signal.addEventListener('abort', stop, { once: true });
  return () => signal.removeEventListener('abort', stop);
}
