import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { processAlive } from '../../src/shared/process.js';

/** A throw-away directory per test; removed by the returned cleanup. */
export async function tempDir(prefix = 'tidemark-test-'): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export async function writeYaml(dir: string, name: string, text: string): Promise<string> {
  const file = join(dir, name);
  await writeFile(file, text);
  return file;
}

/** Temp directories named `<prefix><pid>-…` whose process is gone: what a killed run left behind. */
export async function orphanTempDirs(prefix: string): Promise<string[]> {
  return (await readdir(tmpdir())).filter((name) => {
    const pid = name.startsWith(prefix) ? Number(/^(\d+)-/.exec(name.slice(prefix.length))?.[1]) : Number.NaN;
    return Number.isInteger(pid) && pid > 0 && !processAlive(pid);
  });
}
