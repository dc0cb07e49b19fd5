/**
 * Every example in README.md and docs/ is checked here, so the documentation cannot promise what the CLI does not do:
 * - every ```yaml block is a pipeline file that `tidemark validate` accepts (a Singer target's file, which has no
 *   source, is loaded by `tidemark target` with no input instead); an S3 `endpoint:` in it is pointed at a local
 *   s3rver holding the bucket its `s3://` location names;
 * - every ```sh block runs (`set -euo pipefail`, `tidemark` on PATH) and every ```ts block runs against the built
 *   library, in a workspace where `tidemark demo --dir demo` ran and the page's named yaml files were written
 *   (a yaml block whose first line is `# path/file.yaml` is that file), with stand-ins for the taps they pipe in;
 * - a block that cannot run offline says so, with the reason, in `<!-- not run: reason -->` on the line above it;
 * - every fence names its language (output is ```text), relative links point at files and headings that exist, and
 *   no page cites the internal design notes.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, cli, type CliResult } from '../helpers/cli.js';
import { tempDir } from '../helpers/fs.js';
import { startS3 } from '../helpers/s3.js';
import { codeBlocks, docPages, readPage, ROOT, type CodeBlock } from '../helpers/markdown.js';

const RUNNABLE = new Set(['sh', 'ts']);
const KNOWN_LANGS = new Set(['yaml', 'sh', 'ts', 'text', 'json']);
/** Pages other work writes; linked before they land. */
const PENDING_PAGES = new Set(['docs/config-reference.md']);

/**
 * `${env:NAME}` references get a stand-in value: validation needs them set, never their real content. It is the
 * local S3 server's key, so credentials taken from the environment open its bucket.
 */
function envFor(code: string): Record<string, string> {
  return Object.fromEntries([...code.matchAll(/\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((m) => [m[1]!, 'S3RVER']));
}

/** Validates one yaml block in its own directory; S3 examples get a local server for the bucket they name. */
async function checkPipeline(block: CodeBlock, dir: string): Promise<CliResult> {
  const bucket = /s3:\/\/([a-z0-9][a-z0-9.-]*)/.exec(block.code)?.[1];
  const s3 = bucket === undefined ? undefined : await startS3(bucket);
  try {
    const code = s3 === undefined ? block.code : block.code.replace(/endpoint: \S+/g, `endpoint: ${s3.endpoint}`);
    const file = join(dir, block.file ?? `example-${block.line}.yaml`);
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, `${code}\n`);
    const env = { ...envFor(code), TIDEMARK_CACHE_DIR: join(dir, '.cache') };
    const isTarget = !/^source:/m.test(code);
    return await cli(isTarget ? ['target', '--config', file] : ['validate', file], { env });
  } finally {
    await s3?.stop();
  }
}

function shell(script: string, cwd: string, env: Record<string, string>): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile('bash', ['-c', `set -euo pipefail\n${script}`], { cwd, env: { ...process.env, TIDEMARK_FAILPOINTS: '', ...env } }, (error, stdout, stderr) =>
      resolve({ code: error ? Number(error.code ?? 1) : 0, output: `${stdout}${stderr}` }),
    );
  });
}

/** The anchors GitHub gives a page's headings (not the comments in its code): lower case, punctuation dropped, spaces as hyphens. */
function headingAnchors(markdown: string): string[] {
  const prose = markdown.replace(/^```[\s\S]*?^```/gm, '');
  return [...prose.matchAll(/^#{1,6} (.+)$/gm)].map((m) =>
    m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-'),
  );
}

/**
 * Stand-ins for the programs an example pipes into tidemark. The tap reads `--state` as real Singer taps do: a path
 * to a JSON file (JSON text in its place fails, as it does with them); it does not read its `--config`.
 */
const STAND_INS: Record<string, string> = {
  'tap-github': `#!${process.execPath}
const { readFileSync } = require('node:fs');
const at = process.argv.indexOf('--state');
const state = at > 0 ? JSON.parse(readFileSync(process.argv[at + 1], 'utf8')) : {};
const since = state.bookmarks?.commits?.since ?? '2026-01-01';
const out = (m) => process.stdout.write(JSON.stringify(m) + '\\n');
out({ type: 'SCHEMA', stream: 'commits', key_properties: ['sha'], schema: { properties: { sha: { type: 'string' }, message: { type: 'string' } } } });
out({ type: 'RECORD', stream: 'commits', record: { sha: 'b2-' + since, message: 'since ' + since } });
out({ type: 'STATE', value: { bookmarks: { commits: { since: '2026-02-01' } } } });
`,
};

interface Workspace {
  readonly dir: string;
  readonly env: Record<string, string>;
}

/** The demo's files plus the page's named pipeline files; `tidemark` on PATH is this build's CLI. */
async function workspace(dir: string, blocks: readonly CodeBlock[]): Promise<Workspace> {
  const shim = join(dir, '.bin');
  await mkdir(shim, { recursive: true });
  const programs = { ...STAND_INS, tidemark: `#!/bin/sh\nexec "${process.execPath}" "${BIN}" "$@"\n` };
  for (const [name, script] of Object.entries(programs)) {
    await writeFile(join(shim, name), script);
    await chmod(join(shim, name), 0o755);
  }
  const demo = await cli(['demo', '--dir', join(dir, 'demo')]);
  expect(demo.code, demo.stderr).toBe(0);
  for (const block of blocks) {
    if (block.lang !== 'yaml' || block.file === undefined) continue;
    await mkdir(dirname(join(dir, block.file)), { recursive: true });
    await writeFile(join(dir, block.file), `${block.code}\n`);
  }
  return { dir, env: { PATH: `${shim}:${process.env.PATH ?? ''}`, HOME: dir, TIDEMARK_CACHE_DIR: join(dir, '.cache') } };
}

/**
 * `https://api.example.com` in a ts block (docs/code-sources.md) is this local stand-in: 120 orders over three days,
 * `/orders?updated_since=&newest_first=&page=` in pages of 25 with an absolute `next` URL (inclusive since, as many
 * APIs are), `/orders?day=`, `/days` and `/customers`.
 */
let exampleApi: Promise<{ url: string; close: () => Promise<void> }> | undefined;
afterAll(async () => (await exampleApi)?.close());

function startExampleApi(): Promise<{ url: string; close: () => Promise<void> }> {
  const orders = Array.from({ length: 120 }, (_, i) => {
    const id = i + 1;
    const day = `2024-05-0${1 + Math.floor(i / 40)}`;
    return { id, updated_at: `${day}T10:00:${String(i % 40).padStart(2, '0')}.000001Z`, total: `${id}.50`, status: id % 7 === 0 ? 'refunded' : 'paid', day };
  });
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', `http://${request.headers.host}`);
    const send = (body: unknown) => response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (url.pathname === '/days') return send({ days: ['2024-05-01', '2024-05-02', '2024-05-03'].map((id) => ({ id, version: 'v1' })) });
    if (url.pathname === '/customers') return send({ customers: [{ id: 1, name: 'Ada' }, { id: 2, name: 'Grace' }] });
    if (url.pathname !== '/orders') return response.writeHead(404).end();
    const day = url.searchParams.get('day');
    if (day !== null) return send({ orders: orders.filter((o) => o.day === day).map(({ day: _, ...o }) => o) });
    const since = url.searchParams.get('updated_since') ?? '';
    const selected = orders.filter((o) => o.updated_at >= since).map(({ day: _, ...o }) => o);
    if (url.searchParams.get('newest_first') === '1') selected.reverse();
    const page = Number(url.searchParams.get('page') ?? '0');
    const next = new URL(url);
    next.searchParams.set('page', String(page + 1));
    send({ orders: selected.slice(page * 25, page * 25 + 25), next: (page + 1) * 25 < selected.length ? next.href : null });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve({ url: `http://127.0.0.1:${port}`, close: () => new Promise<void>((done) => server.close(() => done())) });
    }),
  );
}

async function runBlock(block: CodeBlock, ws: Workspace): Promise<void> {
  if (block.lang === 'sh') {
    const out = await shell(block.code, ws.dir, ws.env);
    expect(out.code, `${block.page}:${block.line}\n${block.code}\n---\n${out.output}`).toBe(0);
    return;
  }
  const script = join(ws.dir, `.snippet-${block.line}.mjs`);
  const library = new URL('../../dist/index.js', import.meta.url).href;
  let code = block.code.replace(/from 'tidemark'/g, `from '${library}'`);
  if (code.includes('https://api.example.com')) code = code.replaceAll('https://api.example.com', (await (exampleApi ??= startExampleApi())).url);
  await writeFile(script, code);
  const out = await shell(`"${process.execPath}" "${script}"`, ws.dir, ws.env);
  expect(out.code, `${block.page}:${block.line}\n${out.output}`).toBe(0);
}

const pages = await docPages();

for (const page of pages) {
  const text = await readPage(page);
  const blocks = codeBlocks(page, text);
  describe(page, () => {
    let ws: Workspace | undefined;
    const cleanups: Array<() => Promise<void>> = [];
    afterAll(async () => {
      for (const cleanup of cleanups) await cleanup();
    });
    const pageWorkspace = async (): Promise<Workspace> => {
      if (ws === undefined) {
        const { dir, cleanup } = await tempDir('tidemark-docs-');
        cleanups.push(cleanup);
        ws = await workspace(dir, blocks);
      }
      return ws;
    };

    it('names a known language on every code fence, and a reason for every block not run', () => {
      for (const block of blocks) {
        expect(KNOWN_LANGS.has(block.lang), `${page}:${block.line}: fence language "${block.lang}"`).toBe(true);
        if (block.notRun !== undefined) expect(block.notRun.length, `${page}:${block.line}: not run without a reason`).toBeGreaterThan(3);
      }
    });

    it('never cites the internal design notes, which are not part of the repository', () => {
      expect(text).not.toMatch(/DESIGN\.md|§\s*\d/);
    });

    it('links only to files and headings that exist', async () => {
      for (const [, target, anchor] of text.matchAll(/\]\(([^)\s#]+)(?:#([^)]*))?\)/g)) {
        if (/^[a-z]+:/i.test(target!)) continue;
        const path = join(dirname(join(ROOT, page)), target!);
        if (PENDING_PAGES.has(path.slice(ROOT.length))) continue;
        expect(existsSync(path), `${page} links to ${target}`).toBe(true);
        if (anchor !== undefined) expect(headingAnchors(await readFile(path, 'utf8')), `${page} links to ${target}#${anchor}`).toContain(anchor);
      }
    });

    for (const block of blocks) {
      const name = `${page}:${block.line} ${block.lang}`;
      if (block.lang === 'yaml') {
        it(`${name} is a valid pipeline (tidemark validate)`, async () => {
          const { dir, cleanup } = await tempDir('tidemark-docs-yaml-');
          cleanups.push(cleanup);
          const out = await checkPipeline(block, dir);
          expect(out.code, `${name}\n${out.stdout}${out.stderr}`).toBe(0);
        });
      } else if (RUNNABLE.has(block.lang)) {
        if (block.notRun !== undefined) it.skip(`${name} (not run: ${block.notRun})`, () => {});
        else it(`${name} runs`, async () => runBlock(block, await pageWorkspace()));
      }
    }
  });
}
