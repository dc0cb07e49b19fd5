/**
 * `npm run demo` (and anything else that only needs a current build) calls this instead of `npm run build`: a full
 * build is ~17 s of tsc and esbuild, the demo under 1 s. It builds only when a source is newer than the build.
 *
 *   node scripts/ensure-built.mjs           build if stale
 *   node scripts/ensure-built.mjs --check   exit 1 if stale, 0 if current (builds nothing)
 *   TIDEMARK_ROOT=<dir>                     another checkout (tests)
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = process.env.TIDEMARK_ROOT ?? fileURLToPath(new URL('..', import.meta.url));
// What a build reads, and the files it writes last (tsc's output and then the CLI bundle).
const INPUTS = ['src', 'scripts/bundle.mjs', 'tsconfig.json', 'tsconfig.build.json', 'package.json'];
const OUTPUTS = ['dist/index.js', 'dist/bin/tidemark.cjs'];

function newest(path) {
  let stats;
  try {
    stats = statSync(path);
  } catch {
    return 0;
  }
  if (!stats.isDirectory()) return stats.mtimeMs;
  return readdirSync(path).reduce((max, name) => Math.max(max, newest(join(path, name))), stats.mtimeMs);
}

function oldestOutput() {
  let oldest = Number.POSITIVE_INFINITY;
  for (const file of OUTPUTS) {
    try {
      oldest = Math.min(oldest, statSync(join(root, file)).mtimeMs);
    } catch {
      return undefined; // never built
    }
  }
  return oldest;
}

const built = oldestOutput();
const changed = Math.max(...INPUTS.map((p) => newest(join(root, p))));
const stale = built === undefined || changed > built;
if (process.argv.includes('--check')) process.exit(stale ? 1 : 0);
if (stale) {
  process.stderr.write(built === undefined ? 'building tidemark (no build yet)…\n' : 'building tidemark (sources changed since the last build)…\n');
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const result = spawnSync(npm, ['run', 'build', '--silent'], { cwd: root, stdio: 'inherit' });
  process.exit(result.status ?? 1);
}
