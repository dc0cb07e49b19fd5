import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
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
