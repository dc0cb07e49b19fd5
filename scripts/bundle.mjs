/**
 * Bundles the CLI (src/cli/main.ts) into one CommonJS file, dist/bin/tidemark.cjs, that bin/tidemark.js compiles
 * with V8's code cache. Packages stay in node_modules; commands, sources and destinations stay lazily initialised
 * (esbuild turns their dynamic imports into on-demand module initialisers).
 *
 * The first line carries a hash of the bundle: the code cache is keyed by it, because V8 checks a cache only against
 * the source's length.
 */
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const out = `${root}dist/bin`;
const result = await build({
  entryPoints: [`${root}src/cli/main.ts`],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  packages: 'external',
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
