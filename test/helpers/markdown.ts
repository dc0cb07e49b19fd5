/** Reads the fenced code blocks of the README and docs/ pages, for the tests that run their examples. */
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface CodeBlock {
  /** The page, relative to the repository root. */
  readonly page: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  /** The first word of the info string: `yaml`, `sh`, `ts`, `text`; '' when the fence names none. */
  readonly lang: string;
  readonly code: string;
  /** The reason given by a `<!-- not run: reason -->` comment on the line before the fence, if any. */
  readonly notRun?: string;
  /** The file a yaml block stands for, named by a first line `# path/to/file.yaml`. */
  readonly file?: string;
}

const NOT_RUN = /^<!--\s*not run:\s*(.*?)\s*-->$/;
const FILE_LINE = /^#\s+([\w./-]+\.ya?ml)\b/;

export function codeBlocks(page: string, text: string): CodeBlock[] {
  const lines = text.split('\n');
  const blocks: CodeBlock[] = [];
  for (let i = 0; i < lines.length; i += 1) {
    const open = /^```(\S*)/.exec(lines[i]!);
    if (!open) continue;
    const end = lines.findIndex((line, j) => j > i && line.startsWith('```'));
    if (end < 0) throw new Error(`${page}:${i + 1}: a code fence is never closed`);
    const code = lines.slice(i + 1, end).join('\n');
    const before = i > 0 ? NOT_RUN.exec(lines[i - 1]!.trim()) : null;
    const file = FILE_LINE.exec(lines[i + 1] ?? '')?.[1];
    blocks.push({ page, line: i + 1, lang: open[1]!, code, ...(before ? { notRun: before[1] } : {}), ...(file ? { file } : {}) });
    i = end;
  }
  return blocks;
}

/** README.md and every page under docs/, relative to the repository root. */
export async function docPages(): Promise<string[]> {
  const pages = ['README.md'];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.name.endsWith('.md')) pages.push(relative(ROOT, path));
    }
  };
  await walk(join(ROOT, 'docs'));
  return pages.sort();
}

export async function readPage(page: string): Promise<string> {
  return readFile(join(ROOT, page), 'utf8');
}
