import { createRequire } from 'node:module';
import type pg from 'pg';

let driver: typeof pg | undefined;

/**
 * The `pg` driver, loaded without its Cloudflare Workers probe: where Node has no `navigator` global (Node 20), pg
 * constructs a fetch `Response` at load to sniff the runtime, which loads Node's fetch implementation (undici) —
 * measured 10–13 ms of every run that talks to Postgres, for nothing. A `navigator` that names Node.js, present only
 * for the length of the `require`, answers the probe the way Node 21+ does.
 */
export function loadPg(): typeof pg {
  if (driver !== undefined) return driver;
  const probe = !('navigator' in globalThis);
  if (probe) Object.defineProperty(globalThis, 'navigator', { value: { userAgent: `Node.js/${process.versions.node}` }, configurable: true });
  try {
    driver = createRequire(import.meta.url)('pg') as typeof pg;
  } finally {
    if (probe) delete (globalThis as { navigator?: unknown }).navigator;
  }
  return driver;
}
