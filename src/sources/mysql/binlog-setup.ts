/**
 * What reading the binlog needs from the server, checked before anything is read, and the two positions a log
 * stream starts from: the end of the log now (where a `run` stops) and the point a consistent snapshot sees.
 */
import { SourceError } from '../../core/errors.js';
import { positionText } from './binlog-position.js';

/** The part of a mysql2 promise connection these checks use: a statement's rows come first in its result. */
export interface LogConn {
  query(sql: string): Promise<readonly [unknown, ...unknown[]]>;
}

type Conn = LogConn;

async function rows(conn: Conn, sql: string): Promise<Record<string, unknown>[]> {
  const [result] = await conn.query(sql);
  return result as Record<string, unknown>[];
}

/** What the server is configured with, for messages and `plan`. */
export interface LogSettings {
  readonly logBin: boolean;
  readonly format: string;
  readonly rowImage: string;
  readonly serverId: number;
  /** The path of the binlog files without the number (`/var/lib/mysql/mysql-bin`). */
  readonly basename: string;
  readonly mariadb: boolean;
}

export async function logSettings(conn: Conn): Promise<LogSettings> {
  const [r] = await rows(
    conn,
    `SELECT @@GLOBAL.log_bin AS log_bin, @@GLOBAL.binlog_format AS format, @@GLOBAL.binlog_row_image AS row_image,
            @@GLOBAL.server_id AS server_id, @@GLOBAL.log_bin_basename AS basename, VERSION() AS version`,
  );
  return {
    logBin: String(r!.log_bin) === '1' || String(r!.log_bin).toUpperCase() === 'ON',
    format: String(r!.format).toUpperCase(),
    rowImage: String(r!.row_image).toUpperCase(),
    serverId: Number(r!.server_id),
    basename: String(r!.basename ?? '').replace(/^.*\//, ''),
    mariadb: /mariadb/i.test(String(r!.version)),
  };
}

/** The global privileges of the current user, from SHOW GRANTS (upper case, `ALL PRIVILEGES` kept as written). */
async function globalPrivileges(conn: Conn): Promise<Set<string>> {
  const grants = await rows(conn, 'SHOW GRANTS FOR CURRENT_USER()');
  const privileges = new Set<string>();
  for (const grant of grants) {
    const text = String(Object.values(grant)[0] ?? '');
    const m = /^GRANT (.+?) ON \*\.\* TO /i.exec(text);
    if (!m) continue;
    for (const p of m[1]!.split(',')) privileges.add(p.trim().toUpperCase());
  }
  return privileges;
}

/**
 * Refuses, in one line naming what is missing, a server or user that cannot feed a log stream: the binlog off or
 * not in ROW format, row images that leave columns out (MINIMAL/NOBLOB would turn an update into a partial row), no
 * server id, or a user without the replication privileges (REPLICATION SLAVE to read the log; REPLICATION CLIENT,
 * called BINLOG MONITOR on MariaDB 10.5+, to ask where it ends; SUPER or ALL PRIVILEGES cover both).
 */
export async function checkLogSetup(conn: Conn): Promise<LogSettings> {
  const settings = await logSettings(conn);
  const problems: string[] = [];
  if (!settings.logBin) problems.push('the binary log is off (start the server with log_bin)');
  if (settings.format !== 'ROW') problems.push(`binlog_format is ${settings.format}, not ROW`);
  if (settings.rowImage !== 'FULL') problems.push(`binlog_row_image is ${settings.rowImage}, not FULL`);
  if (settings.serverId === 0) problems.push('server_id is 0');
  const privileges = await globalPrivileges(conn);
  const has = (...names: string[]): boolean => names.some((n) => privileges.has(n));
  if (!has('ALL PRIVILEGES', 'SUPER')) {
    const missing = [
      ...(has('REPLICATION SLAVE', 'REPLICATION REPLICA') ? [] : ['REPLICATION SLAVE']),
      ...(has('REPLICATION CLIENT', 'BINLOG MONITOR') ? [] : [settings.mariadb ? 'BINLOG MONITOR (REPLICATION CLIENT)' : 'REPLICATION CLIENT']),
    ];
    if (missing.length) problems.push(`the user lacks the ${missing.join(' and ')} privilege${missing.length > 1 ? 's' : ''} (GRANT … ON *.*)`);
  }
  if (problems.length) {
    throw new SourceError(`cannot read the MySQL binlog: ${problems.join('; ')}`, { context: { phase: 'log' } });
  }
  return settings;
}

/** The end of the binlog now: where a `run` that started now stops. */
export async function currentPosition(conn: Conn): Promise<string> {
  const [status] = await rows(conn, 'SHOW MASTER STATUS');
  if (!status) throw new SourceError('cannot read the MySQL binlog: SHOW MASTER STATUS returned nothing (is log_bin on?)', { context: { phase: 'log' } });
  return positionText(String(status.File), Number(status.Position));
}

/** The files the server still has, oldest first (SHOW BINARY LOGS), with their sizes. */
export async function binaryLogs(conn: Conn): Promise<{ name: string; size: number }[]> {
  return (await rows(conn, 'SHOW BINARY LOGS')).map((r) => ({ name: String(r.Log_name), size: Number(r.File_size) }));
}

/**
 * Starts a consistent-snapshot transaction on `conn` and returns the binlog position it sees: every transaction
 * committed before that position is in the snapshot and none after it. MariaDB tells it without a lock
 * (binlog_snapshot_file/position, set by START TRANSACTION WITH CONSISTENT SNAPSHOT); MySQL does not, so there
 * FLUSH TABLES WITH READ LOCK holds commits back for the instant it takes to open the snapshot and read the end
 * of the log (needs the RELOAD privilege). The caller reads its rows in the transaction and ends it.
 */
export async function startSnapshot(conn: Conn): Promise<string> {
  await conn.query('START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY');
  const status = await rows(conn, `SHOW STATUS LIKE 'binlog_snapshot_%'`);
  const value = (name: string) => status.find((r) => String(r.Variable_name).toLowerCase() === name)?.Value;
  const file = value('binlog_snapshot_file');
  const offset = value('binlog_snapshot_position');
  if (file !== undefined && file !== null && String(file) !== '' && offset !== undefined) return positionText(String(file), Number(offset));
  await conn.query('ROLLBACK');
  await conn.query('FLUSH TABLES WITH READ LOCK');
  try {
    await conn.query('START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY');
    return await currentPosition(conn);
  } finally {
    await conn.query('UNLOCK TABLES');
  }
}

/** The position before any event of the oldest file the server still has. */
export async function oldestPosition(conn: Conn): Promise<string> {
  const logs = await binaryLogs(conn);
  if (!logs.length) throw new SourceError('cannot read the MySQL binlog: the server lists no binary logs', { context: { phase: 'log' } });
  return positionText(logs[0]!.name, 4);
}

