import type { ServerSourceOptions } from '../server-source.js';

/**
 * The mysql2 connection settings of every MySQL/MariaDB connection tidemark opens (table reads and the binlog
 * client): exact strings for BIGINT/DECIMAL, DATE/DATETIME and JSON, which a JS number or Date would round, without a
 * per-value typeCast (it costs an object and closures per value).
 */
export function exactTextSettings(options: Pick<ServerSourceOptions, 'host' | 'port' | 'user' | 'password' | 'database'>) {
  const { host, port, user, password, database } = options;
  return {
    ...(host !== undefined ? { host } : {}),
    ...(port !== undefined ? { port } : {}),
    ...(user !== undefined ? { user } : {}),
    ...(password !== undefined ? { password } : {}),
    ...(database !== undefined ? { database } : {}),
    charset: 'utf8mb4',
    supportBigNumbers: true,
    bigNumberStrings: true,
    dateStrings: true,
    jsonStrings: true,
  } as const;
}
