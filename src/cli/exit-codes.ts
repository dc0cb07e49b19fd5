/** Exit codes, decided here and nowhere else. */
import { LeaseLostError, TidemarkError } from '../core/errors.js';

export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  locked: 3,
  /** 128 + the signal number, as shells report a process ended by it. */
  sighup: 129,
  sigint: 130,
  sigterm: 143,
} as const;

export function exitCodeFor(error: unknown): number {
  if (error instanceof TidemarkError) {
    if (error.kind === 'config' || error.kind === 'usage') return EXIT.usage;
    // 3 means another live run holds the pipeline; a run that lost its own lease failed.
    if (error.kind === 'conflict') return error instanceof LeaseLostError ? EXIT.failed : EXIT.locked;
  }
  return EXIT.failed;
}
