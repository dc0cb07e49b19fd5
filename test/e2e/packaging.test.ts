/**
 * The package as a user gets it: `npm pack`, installed globally into a temporary prefix, and run from there, far
 * from the clone. Also: `npm run demo` reuses a current build, and S3 commands do not print the AWS SDK's notice.
 */
import { execFile } from 'node:child_process';
import { cp, mkdir, readFile, stat, symlink, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/fs.js';
import { FULL_SWEEP } from '../helpers/sweep.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

describe('the packed package', () => {
  let tmp: { dir: string; cleanup: () => Promise<void> };
  let tarball: string;
  let files: string[];

  beforeAll(async () => {
    tmp = await tempDir('tidemark-pack-');
    // --ignore-scripts: `prepare` would build again; the test runs on the build `npm test` just made.
    const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', tmp.dir], { cwd: ROOT });
    const [packed] = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
    tarball = join(tmp.dir, packed!.filename);
    files = packed!.files.map((f) => f.path);
  });
  afterAll(() => tmp.cleanup());

  it('holds the CLI, the library and the dashboard page, and no tests or fixtures', () => {
    expect(files).toEqual(expect.arrayContaining(['bin/tidemark.js', 'dist/bin/tidemark.cjs', 'dist/index.js', 'dist/index.d.ts', 'src/ui/static/index.html', 'README.md']));
    expect(files.filter((f) => /^(test|bench|scripts|\.ci)\//.test(f) || /fixtures/.test(f))).toEqual([]);
    expect(files.filter((f) => f.startsWith('src/') && !f.startsWith('src/ui/static/'))).toEqual([]);
  });

  it('installs with npm install -g into a prefix, and `tidemark demo` runs from there', async () => {
    const prefix = join(tmp.dir, 'prefix');
    // The npm cache serves what it holds. better-sqlite3's install script fetches a prebuilt binding from GitHub or,
    // where that is out of reach (as on CI), compiles it for minutes: `npm test` installs without scripts and gives
    // the package the binding this checkout built; TIDEMARK_SWEEP=all installs exactly as a user does.
    const scripts = FULL_SWEEP ? [] : ['--ignore-scripts'];
    await run('npm', ['install', '-g', '--prefix', prefix, tarball, '--prefer-offline', '--no-audit', '--no-fund', ...scripts], { cwd: tmp.dir, timeout: 600_000 });
    if (!FULL_SWEEP) {
      const binding = 'node_modules/better-sqlite3/build';
      await cp(join(ROOT, binding), join(prefix, 'lib/node_modules/tidemark', binding), { recursive: true });
    }
    const work = join(tmp.dir, 'work');
    await mkdir(work);
    const { stdout } = await run(join(prefix, 'bin', 'tidemark'), ['demo'], { cwd: work, env: { ...process.env, TIDEMARK_FAILPOINTS: '' } });
    expect(stdout).toMatch(/run 1: orders: [\d,]+ rows/);
    expect(stdout).toContain('warehouse: demo/warehouse.duckdb');
    const help = await run(join(prefix, 'bin', 'tidemark'), ['--help'], { cwd: work });
    expect(help.stdout).toContain('Usage: tidemark');
    // The SQLite destination's native binding loads from the installed tree.
    const sqlite = join(prefix, 'lib/node_modules/tidemark/node_modules/better-sqlite3');
    const probe = await run(process.execPath, ['-e', `console.log(new (require(${JSON.stringify(sqlite)}))(':memory:').prepare('SELECT 41 + 1 AS n').get().n)`]);
    expect(probe.stdout.trim()).toBe('42');
    await typescriptProgram(join(prefix, 'lib/node_modules/tidemark'));
  }, 660_000);
});

/**
 * A TypeScript project using the installed package (linked into its node_modules, as `npm install` would place it):
 * a code source and a pipeline in code compile under `tsc --strict`, run, and read their rows back; a misspelled key
 * of a pipeline is a compile error.
 */
async function typescriptProgram(installed: string): Promise<void> {
  const project = join(installed, '..', '..', '..', '..', 'ts-project');
  await mkdir(join(project, 'node_modules'), { recursive: true });
  await symlink(installed, join(project, 'node_modules', 'tidemark'));
  await writeFile(join(project, 'package.json'), JSON.stringify({ type: 'module', private: true }));
  const tsconfig = { compilerOptions: { strict: true, target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', outDir: 'out', skipLibCheck: true }, files: ['main.ts'] };
  await writeFile(join(project, 'tsconfig.json'), JSON.stringify(tsconfig));
  await writeFile(
    join(project, 'main.ts'),
    `import { codeSource, definePipeline, defineStream, readTable, resumeAt, run, type RunResult } from 'tidemark';

interface Order { readonly id: bigint; readonly updated_at: string; readonly total: string }

const orders = defineStream<Order>({
  name: 'orders',
  primaryKey: 'id',
  cursor: 'updated_at',
  columns: { id: 'int64', updated_at: 'timestamptz', total: 'decimal(12,2)' },
  async *read({ since, resume }) {
    for (let page = typeof resume === 'number' ? resume : 0; page < 4; page += 1) {
      const records: Order[] = [1, 2, 3].map((i) => ({ id: BigInt(page * 3 + i), updated_at: \`2024-01-0\${page + 1}T00:00:00.00000\${i}Z\`, total: \`\${page}.\${i}0\` }));
      yield records.filter((r) => since === undefined || r.updated_at > String(since));
      yield resumeAt(page + 1);
    }
  },
});
const pipeline = definePipeline({ name: 'typed', source: codeSource({ streams: [orders] }), destination: { type: 'sqlite', path: './typed.sqlite' }, streams: [{ name: 'orders', write: 'append', checkpoint_rows: 3 }] });
const result: RunResult = await run(pipeline);
const again: RunResult = await run(pipeline);
let sum = 0n;
for await (const row of readTable(pipeline, 'orders', { orderBy: ['id'] })) if (typeof row.id === 'bigint') sum += row.id;
console.log(JSON.stringify({ ok: result.ok, read: result.streams[0]?.rowsRead, commits: result.streams[0]?.commits, again: again.streams[0]?.rowsRead, sum: String(sum) }));
`,
  );
  const tsc = join(ROOT, 'node_modules', '.bin', 'tsc');
  await run(tsc, ['-p', project], { cwd: project }).catch((e: { stdout?: string }) => {
    throw new Error(`tsc --strict failed:\n${e.stdout ?? String(e)}`);
  });
  const { stdout } = await run(process.execPath, [join(project, 'out', 'main.js')], { cwd: project, env: { ...process.env, TIDEMARK_FAILPOINTS: '' } });
  // Four pages, each committed with its resume point, and the end of the window (its token cleared).
  expect(JSON.parse(stdout)).toEqual({ ok: true, read: 12, commits: 5, again: 0, sum: '78' });
  await writeFile(join(project, 'main.ts'), "import { definePipeline } from 'tidemark';\nexport const p = definePipeline({ name: 'x', source: { type: 'sqlite', path: 'a' }, streams: [{ table: 't', chekpoint_rows: 5 }] });\n");
  const misspelled = await run(tsc, ['-p', project], { cwd: project }).then(
    () => '',
    (e: { stdout?: string }) => e.stdout ?? '',
  );
  expect(misspelled).toMatch(/chekpoint_rows/);
}

describe('npm run demo', () => {
  it('does not rebuild when dist/ is newer than every source', async () => {
    const bundle = join(ROOT, 'dist', 'bin', 'tidemark.cjs');
    const before = (await stat(bundle)).mtimeMs;
    // Checked first, so a tree edited since its build fails here instead of rebuilding under other running tests.
    await run(process.execPath, [join(ROOT, 'scripts', 'ensure-built.mjs'), '--check'], { cwd: ROOT }).catch(() => {
      throw new Error('dist/ is older than src/: build first (`npm run build`), as `npm test` does');
    });
    const { stderr } = await run(process.execPath, [join(ROOT, 'scripts', 'ensure-built.mjs')], { cwd: ROOT });
    expect(stderr).toBe('');
    expect((await stat(bundle)).mtimeMs).toBe(before);
  });

  it('ensure-built reports a source newer than the build as stale, and a current build as current', async () => {
    const tree = await tempDir('tidemark-stale-');
    try {
      await mkdir(join(tree.dir, 'src'), { recursive: true });
      await mkdir(join(tree.dir, 'dist', 'bin'), { recursive: true });
      const source = join(tree.dir, 'src', 'a.ts');
      await writeFile(source, 'export {};\n');
      for (const f of ['dist/index.js', 'dist/bin/tidemark.cjs']) await writeFile(join(tree.dir, f), '');
      const check = () =>
        run(process.execPath, [join(ROOT, 'scripts', 'ensure-built.mjs'), '--check'], { env: { ...process.env, TIDEMARK_ROOT: tree.dir } }).then(
          () => 'current',
          () => 'stale',
        );
      const old = new Date(Date.now() - 60_000);
      await utimes(source, old, old);
      await utimes(join(tree.dir, 'src'), old, old);
      expect(await check()).toBe('current');
      await utimes(source, new Date(), new Date(Date.now() + 60_000));
      expect(await check()).toBe('stale');
    } finally {
      await tree.cleanup();
    }
  });

  it('is wired to ensure-built, not to a full build', async () => {
    const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(pkg.scripts.demo).not.toMatch(/npm run build/);
  });
});

describe('S3 commands', () => {
  it('do not print the AWS SDK Node-version notice, even through the library', async () => {
    const script = `const { openObjectStore } = await import(${JSON.stringify(join(ROOT, 'dist', 'shared', 'object-store.js'))});
      await openObjectStore('s3://bucket/prefix', { endpoint: 'http://127.0.0.1:9', region: 'us-east-1' });
      process.stdout.write('opened');`;
    const { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: _, ...env } = process.env;
    const { stdout, stderr } = await run(process.execPath, ['--input-type=module', '-e', script], { env });
    expect(stdout).toBe('opened');
    expect(stderr).not.toMatch(/NodeVersionSupportWarning|AWS SDK for JavaScript/);
  });
});
