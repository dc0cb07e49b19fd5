/** The driver settings every connection of a Postgres source starts from. */
import type pg from 'pg';
import type { ServerSourceOptions } from '../server-source.js';

/**
 * Connection settings from the source's options. `application_name` marks tidemark's own sessions: the safe mark
 * skips them (they only read), and a taken-over run's sessions are found by it.
 */
export function pgClientConfig(options: ServerSourceOptions): pg.ClientConfig {
  const { url, host, port, user, password, database } = options;
  return {
    ...(url !== undefined ? { connectionString: url } : {}),
    ...(host !== undefined ? { host } : {}),
    ...(port !== undefined ? { port } : {}),
    ...(user !== undefined ? { user } : {}),
    ...(password !== undefined ? { password } : {}),
    ...(database !== undefined ? { database } : {}),
    application_name: 'tidemark',
  };
}
