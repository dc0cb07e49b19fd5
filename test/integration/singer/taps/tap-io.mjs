// What every test tap starts with: Singer's `--config <file>` and `--state <file>` arguments, and a line writer.
import { readFileSync } from 'node:fs';

export const args = process.argv.slice(2);
const arg = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
export const config = JSON.parse(readFileSync(arg('--config'), 'utf8'));
export const state = arg('--state') ? JSON.parse(readFileSync(arg('--state'), 'utf8')) : {};
export const out = (line) => process.stdout.write(line + '\n');
