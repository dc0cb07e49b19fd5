import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { UsageError } from '../core/errors.js';

/** Pipeline files as given; a directory contributes its `*.yaml` / `*.yml` files, sorted, not recursively. */
export async function pipelineFiles(inputs: readonly string[]): Promise<string[]> {
  const files: string[] = [];
  for (const input of inputs) {
    const info = await stat(input).catch(() => undefined);
    if (info === undefined) throw new UsageError(`no such file or directory: ${input}`);
    if (!info.isDirectory()) {
      files.push(input);
      continue;
    }
    const found = (await readdir(input)).filter((f) => /\.ya?ml$/i.test(f) && !f.startsWith('.')).sort();
    if (found.length === 0) throw new UsageError(`no pipeline files (*.yaml, *.yml) in ${input}`);
    files.push(...found.map((f) => join(input, f)));
  }
  return [...new Set(files)];
}
