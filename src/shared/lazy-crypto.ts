import { createRequire } from 'node:module';

/**
 * node:crypto, loaded on first use: it costs ~4 ms of start-up, and a no-op run over local files (config from the
 * cache, a file lease, stat-only listing) never needs it.
 */
export function nodeCrypto(): typeof import('node:crypto') {
  return createRequire(import.meta.url)('node:crypto') as typeof import('node:crypto');
}
