/**
 * Bundles the CLI (src/cli/main.ts) into one CommonJS file, dist/bin/tidemark.cjs, that bin/tidemark.js compiles
 * with V8's code cache. Most packages stay in node_modules (IN_BUNDLE names the exceptions); commands, sources and
 * destinations stay lazily initialised (esbuild turns their dynamic imports into on-demand module initialisers).
 *
 * The first line carries a hash of the bundle: the code cache is keyed by it, because V8 checks a cache only against
 * the source's length.
 */
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const { dependencies } = JSON.parse(readFileSync(`${root}package.json`, 'utf8'));
const IN_BUNDLE = new Set(['zod', 'yaml', 'commander', '@duckdb/node-api', 'pg', 'pg-copy-streams', 'mysql2', 'cli-progress', ...Object.keys(dependencies).filter((name) => name.startsWith('@opentelemetry/'))]);
const out = `${root}dist/bin`;
const result = await build({
  entryPoints: [`${root}src/cli/main.ts`],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  // Pure JavaScript packages that most commands load are bundled: they share the bundle's code cache instead of being
  // compiled at every start (loading zod took 135 ms, @duckdb/node-api 174, mysql2 85, pg 76, yaml 47). A command
  // took 0.50 s of CPU instead of 0.60-0.63 s (state show, a no-op run). OpenTelemetry is bundled too: a run with
  // telemetry on required ~260 of its files one by one; bundled, they initialise only when telemetry is on.
  external: [...Object.keys(dependencies).filter((name) => !IN_BUNDLE.has(name)), '@duckdb/node-bindings'],
  // Packages load with require(): the ES module loader and its CommonJS export scan cost more than the package.
  supported: { 'dynamic-import': false },
  // CommonJS has no import.meta: each use reads the bundle's own file URL instead.
  define: { 'import.meta.url': '__tidemarkBundleUrl' },
  banner: { js: `'use strict';\nconst __tidemarkBundleUrl = require('node:url').pathToFileURL(__filename).href;` },
  // Smaller to read at every start; names stay, for stack traces.
  minifyWhitespace: true,
  minifySyntax: true,
  write: false,
  logLevel: 'warning',
});
const code = result.outputFiles[0].text;
const hash = createHash('sha256').update(code).digest('hex').slice(0, 16);
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
writeFileSync(`${out}/tidemark.cjs`, `// tidemark-bundle ${hash}\n${code}`);
