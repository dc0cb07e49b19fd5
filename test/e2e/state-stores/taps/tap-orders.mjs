#!/usr/bin/env node
// A small Singer tap for the state-document tests. Stream `orders` (key id, replication key updated_at, one record a
// second), read `updated_at >= bookmark` as most taps do, with the Singer SDK's bookmark form
// (`bookmarks.orders.{replication_key, replication_key_value}`).
// Config: {"count": N, "state_every": S, "bump": B?, "crash_after": K?}: ids 1..N, a STATE after every S records,
// B added to every amount (an upstream correction), exit 3 after K records.
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const arg = (name) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const config = JSON.parse(readFileSync(arg('--config'), 'utf8'));
const state = arg('--state') ? JSON.parse(readFileSync(arg('--state'), 'utf8')) : {};
const out = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);

const schema = {
  type: 'object',
  properties: { id: { type: 'integer' }, updated_at: { type: 'string', format: 'date-time' }, amount: { type: 'integer' } },
};
const stamp = (id) => new Date(Date.UTC(2024, 0, 1) + id * 1000).toISOString().replace('.000Z', '.000001Z');
const bookmark = state.bookmarks?.orders?.replication_key_value;
const every = config.state_every ?? 5;
out({ type: 'SCHEMA', stream: 'orders', schema, key_properties: ['id'], bookmark_properties: ['updated_at'] });
let written = 0;
let last = bookmark;
for (let id = 1; id <= config.count; id += 1) {
  if (bookmark !== undefined && stamp(id) < bookmark) continue;
  if (config.crash_after !== undefined && written >= config.crash_after) {
    process.stderr.write(`tap-orders: simulated failure after ${written} records\n`);
    process.exit(3);
  }
  out({ type: 'RECORD', stream: 'orders', record: { id, updated_at: stamp(id), amount: id * 10 + (config.bump ?? 0) } });
  written += 1;
  last = stamp(id);
  if (written % every === 0) out({ type: 'STATE', value: { bookmarks: { orders: { replication_key: 'updated_at', replication_key_value: last } } } });
}
out({ type: 'STATE', value: { bookmarks: { orders: { replication_key: 'updated_at', replication_key_value: last ?? null } } } });
