import { createRequire } from 'node:module';

/*
 * Node modules that a no-op run never needs, loaded on first use: each costs milliseconds of start-up when imported at
 * the top of a module the CLI bundle initialises.
 */

/** node:crypto (~4 ms): a no-op run over local files (config from the cache, a file lease, stat-only listing) never needs it. */
export function nodeCrypto(): typeof import('node:crypto') {
  return createRequire(import.meta.url)('node:crypto') as typeof import('node:crypto');
}

/** node:stream and its promise API (~2 ms: Node's whole stream stack), for hashing and downloading files. */
export function nodeStreams(): { readonly Readable: typeof import('node:stream').Readable; readonly pipeline: typeof import('node:stream/promises').pipeline } {
  const require = createRequire(import.meta.url);
  return { Readable: (require('node:stream') as typeof import('node:stream')).Readable, pipeline: (require('node:stream/promises') as typeof import('node:stream/promises')).pipeline };
}
