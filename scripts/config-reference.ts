/** Writes docs/config-reference.md from the pipeline schema (`npm run docs:config`). */
import { writeFileSync } from 'node:fs';
import { configReference } from '../src/config/config-reference.js';

writeFileSync(new URL('../docs/config-reference.md', import.meta.url), configReference());
