/**
 * Where the job queue lives: a Redis URL, a BullMQ queue name and a key prefix. ioredis and BullMQ load only when a
 * queue is used, so `tidemark run` never pays for them.
 */
import type { Redis } from 'ioredis';
import { UsageError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';

export interface QueueTarget {
  /** `redis://[user:password@]host:port[/db]` or `rediss://…`. */
  readonly url: string;
  /** The BullMQ queue name (default `tidemark`). */
  readonly name: string;
  /** Prefix of every Redis key of the queue (default `tidemark`), so queues of several deployments can share a server. */
  readonly prefix: string;
}

export const DEFAULT_QUEUE_NAME = 'tidemark';
export const DEFAULT_QUEUE_PREFIX = 'tidemark';

export function queueTarget(url: string, options: { name?: string | undefined; prefix?: string | undefined } = {}): QueueTarget {
  if (!/^rediss?:\/\/[^\s]+$/.test(url)) throw new UsageError(`--queue must be a redis:// or rediss:// URL, got ${JSON.stringify(redactUrl(url))}`);
  const name = options.name ?? DEFAULT_QUEUE_NAME;
  // BullMQ builds keys as prefix:name:…, so a colon in either would read as another queue's keys.
  if (!/^[A-Za-z0-9_.-]+$/.test(name)) throw new UsageError(`--queue-name: use letters, digits, _ . - (got ${JSON.stringify(name)})`);
  const prefix = options.prefix ?? DEFAULT_QUEUE_PREFIX;
  if (!/^[A-Za-z0-9_.-]+$/.test(prefix)) throw new UsageError(`--queue-prefix: use letters, digits, _ . - (got ${JSON.stringify(prefix)})`);
  return { url, name, prefix };
}

/** The URL without its password, for messages. */
export function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
}

/**
 * BullMQ needs `maxRetriesPerRequest: null` on the connections its workers block on; a connection that cannot reach
 * Redis fails the first command after a few quick retries instead of hanging a CLI forever.
 */
export async function connectRedis(url: string, options: { failFast?: boolean; maxRetriesPerRequest?: number } = {}): Promise<Redis> {
  const { Redis: RedisClient } = await import('ioredis');
  const client = new RedisClient(url, {
    maxRetriesPerRequest: options.maxRetriesPerRequest ?? null,
    lazyConnect: true,
    ...(options.failFast ? { retryStrategy: (times: number) => (times > 3 ? null : 200 * times) } : {}),
  });
  client.on('error', () => undefined); // reported by the command that fails; ioredis would otherwise print every retry
  try {
    await client.connect();
  } catch (cause) {
    client.disconnect();
    throw new UsageError(`cannot connect to the queue at ${redactUrl(url)}: ${(cause as Error).message}`, { cause });
  }
  return client;
}

/**
 * Says once (not per retry) when Redis cannot be reached, and again when it is back; ioredis retries meanwhile. The
 * returned function tells whether it is unreachable now, so callers can keep quiet about the errors that follow.
 */
export function reportReachability(client: Redis, url: string, logger: Logger): () => boolean {
  const where = redactUrl(url);
  let unreachable = false;
  const lost = (why: string) => {
    if (unreachable) return;
    unreachable = true;
    logger.log('warn', `queue at ${where} is unreachable (${why}); retrying until it is back`);
  };
  client.on('error', (error: Error) => lost(error.message));
  // A lost connection is retried ('reconnecting'); one this process closes (quit, at shutdown) only ends ('close').
  client.on('reconnecting', () => lost('connection closed'));
  client.on('ready', () => {
    if (!unreachable) return;
    unreachable = false;
    logger.log('info', `queue at ${where} is reachable again`);
  });
  return () => unreachable;
}

/** A connection for a long-running worker: it never gives up, and may be opened before Redis is up. */
export async function connectRedisWaiting(url: string, logger: Logger): Promise<{ client: Redis; down: () => boolean }> {
  const { Redis: RedisClient } = await import('ioredis');
  const client = new RedisClient(url, { maxRetriesPerRequest: null });
  const down = reportReachability(client, url, logger);
  await new Promise<void>((resolve) => (client.status === 'ready' ? resolve() : client.once('ready', () => resolve())));
  return { client, down };
}
