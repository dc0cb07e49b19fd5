/**
 * A private PostgreSQL cluster for fault tests that need server settings of their own (a tiny
 * max_slot_wal_keep_size, restarts): created with pg_createcluster on a free port, trust auth on 127.0.0.1, and
 * dropped with its data when the test ends. The shared server on 5432 is never touched.
 */
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { appendFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface PrivateCluster {
  /** `postgres://postgres@127.0.0.1:<port>` */
  readonly base: string;
  /** `pg_ctlcluster restart -m fast`: every session is terminated, the server comes back on the same port. */
  restart(): Promise<void>;
  drop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Starts a cluster with `settings` added to its postgresql.conf (wal_level = logical always). */
export async function startPrivateCluster(settings: Readonly<Record<string, string>> = {}): Promise<PrivateCluster> {
  const version = readdirSync('/etc/postgresql').sort().at(-1)!;
  const name = `tm_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const port = await freePort();
  await run('pg_createcluster', [version, name, '-p', String(port), '--', '--auth=trust']);
  const drop = async () => {
    await run('pg_dropcluster', ['--stop', version, name]).catch(() => undefined);
  };
  try {
    const conf = { wal_level: 'logical', listen_addresses: "'127.0.0.1'", fsync: 'off', ...settings };
    await appendFile(`/etc/postgresql/${version}/${name}/postgresql.conf`, Object.entries(conf).map(([k, v]) => `${k} = ${v}\n`).join(''));
    await run('pg_ctlcluster', [version, name, 'start']);
  } catch (error) {
    await drop();
    throw error;
  }
  const restart = async () => {
    await run('pg_ctlcluster', [version, name, 'restart', '-m', 'fast']);
  };
  return { base: `postgres://postgres@127.0.0.1:${port}`, restart, drop };
}
