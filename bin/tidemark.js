#!/usr/bin/env node
'use strict';
/*
 * Starts the CLI bundle (dist/bin/tidemark.cjs, `npm run bundle`) from V8's code cache. Start-up is most of a no-op
 * run, and most of start-up is compiling JavaScript and loading modules: one CommonJS file compiled from its cache
 * skips both the ES module loader and the compile (measured: ~25 ms of a ~120 ms no-op). This file is CommonJS
 * (bin/package.json) for the same reason. The cache lives in the user's cache directory, keyed by the bundle's hash
 * (its first line), Node's version and the CPU; TIDEMARK_CODE_CACHE=off compiles without it.
 */
const { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } = require('node:fs');
const { createRequire } = require('node:module');
const { homedir } = require('node:os');
const { dirname, join } = require('node:path');
const { Script } = require('node:vm');

const file = join(__dirname, '..', 'dist', 'bin', 'tidemark.cjs');
const source = readFileSync(file, 'utf8');
const build = /^\/\/ tidemark-bundle (\w+)/.exec(source)?.[1];
const cacheDir = process.env.TIDEMARK_CODE_CACHE === 'off' ? undefined : userCacheDir();
const cacheFile = build && cacheDir && join(cacheDir, `${build}-${source.length}-${process.version}-${process.arch}.bin`);
let cachedData;
if (cacheFile) {
  try {
    cachedData = readFileSync(cacheFile);
  } catch {
    // not cached yet
  }
}
// The bundle's own import() calls become require() (see scripts/bundle.mjs); pipeline modules (`tidemark run
// pipeline.mjs`) are ES modules, imported through this file, which Node's ES module loader serves.
globalThis[Symbol.for('tidemark.import')] = (specifier) => import(specifier);
const script = new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, { filename: file, cachedData });
const bundle = { exports: {} };
script.runInThisContext()(bundle.exports, createRequire(file), bundle, file, dirname(file));

// When the event loop empties while the command still waits (a promise nothing can settle any more), Node ends the
// process with exit code 0, as if the command had succeeded; say so and fail instead.
let finished = false;
process.once('beforeExit', () => {
  if (finished) return;
  process.stderr.write('error: tidemark ended before the command finished (it waited for something that could not happen)\n');
  process.exitCode = 1;
});
bundle.exports.main(process.argv.slice(2)).then((code) => {
  finished = true;
  process.exitCode = code;
  if (cacheFile && (cachedData === undefined || script.cachedDataRejected)) saveCache(script.createCachedData());
});

/** Where the cache lives; none when there is no home directory to put it in. */
function userCacheDir() {
  try {
    return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'tidemark', 'code');
  } catch {
    return undefined;
  }
}

/** After the run, so the cache holds the functions it compiled; a cache that cannot be written only costs time. */
function saveCache(data) {
  try {
    mkdirSync(cacheDir, { recursive: true, mode: 0o700 });
    const tmp = `${cacheFile}.${process.pid}.tmp`;
    writeFileSync(tmp, data, { mode: 0o600 });
    renameSync(tmp, cacheFile);
    pruneCache();
  } catch {
    // read-only or full disk
  }
}

/** Each build and Node version leaves an entry (~0.2 MB): the newest few are kept, for installs side by side. */
function pruneCache() {
  const entries = readdirSync(cacheDir)
    .map((name) => join(cacheDir, name))
    .map((path) => ({ path, at: statSync(path).mtimeMs }))
    .sort((a, b) => b.at - a.at);
  for (const { path } of entries.slice(8)) rmSync(path, { force: true });
}
