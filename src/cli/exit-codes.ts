/** Exit codes, decided here and nowhere else. */
import { TidemarkError } from '../core/errors.js';

export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  locked: 3,
  /** 128 + the signal number, as shells report a process ended by it. */
  sigint: 130,
  sigterm: 143,
} as const;

export function exitCodeFor(error: unknown): number {
  if (error instanceof TidemarkError) {
    if (error.kind === 'config' || error.kind === 'usage') return EXIT.usage;
    if (error.kind === 'conflict') return EXIT.locked;
  }
  return EXIT.failed;
}
