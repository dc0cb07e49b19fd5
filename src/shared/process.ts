import { readFileSync, readlinkSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';

/** Whether a process of this host still runs: signal 0 checks without touching it (EPERM: alive, not ours). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

let scope: string | undefined;

/**
 * Where a PID means something: this boot of the kernel and this PID namespace (`<boot id>/<pid namespace>`, empty
 * off Linux). Two containers on host networking share a hostname, yet neither can see the other's processes, and a
 * PID seen before a reboot may name another process after it: a lease holder's PID is only checked in its own scope.
 */
export function processScope(): string {
  if (scope !== undefined) return scope;
  const read = (f: () => string): string => {
    try {
      return f().trim();
    } catch {
      return '';
    }
  };
  const boot = read(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8'));
  const namespace = read(() => readlinkSync('/proc/self/ns/pid'));
  scope = boot === '' && namespace === '' ? '' : `${boot}/${namespace}`;
  return scope;
}

/**
 * True only when a lease holder's process is provably gone: same host, same scope (see `processScope`) and no such
 * PID. Anywhere else, the lease's expiry alone says whether its holder lives.
 */
export function holderGone(holder: { readonly host: string; readonly pid: number; readonly scope?: string | null | undefined }): boolean {
  return holder.host === hostname() && (holder.scope ?? '') === processScope() && !processAlive(holder.pid);
}

/**
 * A temp directory named after this process (`<tmp>/<prefix><pid>-XXXXXX`), so that a later process can tell it
 * from the directory of a run still going when a killed run left it behind.
 */
export async function ownedTempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `${prefix}${process.pid}-`));
}

const swept = new Set<string>();

/** Removes, once per process and prefix, the `ownedTempDir`s of processes that are gone (runs that were killed). */
export async function removeOrphanTempDirs(prefix: string): Promise<void> {
  if (swept.has(prefix)) return;
  swept.add(prefix);
  const names = await readdir(tmpdir()).catch(() => [] as string[]);
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(/^(\d+)-/.exec(name.slice(prefix.length))?.[1]);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || processAlive(pid)) continue;
    await rm(join(tmpdir(), name), { recursive: true, force: true }).catch(() => undefined);
  }
}
