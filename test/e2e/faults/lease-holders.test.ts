/**
 * Who holds a lease, across containers: a holder on a host of the same name whose PID this process cannot see
 * (another PID namespace, or before a reboot) is judged by its lease's expiry alone; only a holder provably gone
 * (same host, same boot and PID namespace, no such process) is taken over at once.
 */
import { mkdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { processAlive } from '../../../src/shared/process.js';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { createItems, itemRange } from '../../helpers/shop.js';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

/** A PID no process of this namespace has. */
function deadPid(): number {
  let pid = 4_000_000;
  while (processAlive(pid)) pid -= 1;
  return pid;
}

function yaml(source: string, target: string, state?: string): string {
  return `name: items
source: {type: sqlite, path: ${JSON.stringify(source)}}
streams:
  - table: items
    primary_key: [id]
    cursor: updated_at
    checkpoint_rows: 20
destination: {type: duckdb, path: ${JSON.stringify(target)}}
${state !== undefined ? `state: ${state}` : ''}
`;
}

/** A live 2-minute lease as a holder elsewhere records it: our hostname, a PID we cannot see, its own scope. */
function foreignHolder(scope: string | undefined): { host: string; pid: number; scope?: string; token: number; acquiredAt: string; expiresAt: number; released: boolean } {
  return { token: 7, host: hostname(), pid: deadPid(), ...(scope !== undefined ? { scope } : {}), acquiredAt: new Date().toISOString(), expiresAt: Date.now() + 120_000, released: false };
}

/** This process's boot id and PID namespace, as tidemark records them (`<boot id>/pid:[inode]`). */
const BOOT = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
const OWN_SCOPE = `${BOOT}/${readlinkSync('/proc/self/ns/pid')}`;
const OTHER_NAMESPACE = `${BOOT}/pid:[4026599999]`;

describe.each([
  ['another PID namespace of this boot', OTHER_NAMESPACE, 3],
  ['another boot', 'f00dfeed-0000-4000-8000-000000000000/pid:[1]', 3],
  ['a version that did not record it', undefined, 3],
  ['this boot and namespace, its process gone', OWN_SCOPE, 0],
] as const)('a live lease held from %s', (_label, scope, expected) => {
  it('file lease: judged by expiry unless its process is provably gone', async () => {
    const source = join(dir, 'source.sqlite');
    const target = join(dir, 'warehouse.duckdb');
    createItems(source, itemRange(1, 60, 3));
    const config = await writeYaml(dir, 'p.yaml', yaml(source, target));
    const leases = join(`${target}.locks`, 'items');
    mkdirSync(leases, { recursive: true });
    writeFileSync(join(leases, 'lease-000000000007.json'), JSON.stringify(foreignHolder(scope)));
    const out = await cli(['run', config]);
    expect(out.code, out.stderr).toBe(expected);
    if (expected === 3) expect(out.stderr).toMatch(/pipeline items is already running .*on /);
  });

  it('SQLite store lease: judged by expiry unless its process is provably gone', async () => {
    const source = join(dir, 'source.sqlite');
    const store = join(dir, 'state.sqlite');
    createItems(source, itemRange(1, 60, 3));
    const config = await writeYaml(dir, 'p.yaml', yaml(source, join(dir, 'w.duckdb'), `{type: sqlite, path: ${JSON.stringify(store)}}`));
    // The lease table as a version before scopes wrote it: the run adds the column.
    const db = new Database(store);
    db.exec(`CREATE TABLE _tidemark_leases (pipeline TEXT PRIMARY KEY, token INTEGER NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, acquired_at TEXT NOT NULL, expires_at INTEGER NOT NULL, released INTEGER NOT NULL)`);
    const h = foreignHolder(scope);
    db.prepare(`INSERT INTO _tidemark_leases VALUES ('items', 7, ?, ?, ?, ?, 0)`).run(h.host, h.pid, h.acquiredAt, h.expiresAt);
    if (scope !== undefined) {
      db.exec(`ALTER TABLE _tidemark_leases ADD COLUMN scope TEXT`);
      db.prepare(`UPDATE _tidemark_leases SET scope = ?`).run(scope);
    }
    db.close();
    const out = await cli(['run', config]);
    expect(out.code, out.stderr).toBe(expected);
  });
});
