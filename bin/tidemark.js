#!/usr/bin/env node
// The CLI is bundled (dist/bin, `npm run bundle`): one module graph loads in a few files instead of ~40, which is a
// tenth of a no-op run. The library (dist/index.js) is the same code, compiled by tsc module by module.
import { main } from '../dist/bin/main.js';

process.exitCode = await main(process.argv.slice(2));
