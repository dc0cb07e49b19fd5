#!/usr/bin/env node
// A Singer tap that reads `>= bookmark`, as most real taps do: records come in groups sharing one updated_at, its
// bookmark is the updated_at of the last record, and a resumed or later run sends the bookmark's whole group again.
// Within a group, ids are not in order. Config: {"count": N, "group": G, "state_every": S, "crash_after": K?}.
// Stream: events (key id, replication key updated_at, amount as numeric(12,2)).
import { config, out, state } from './tap-io.mjs';
const schema = {
  type: 'object',
  properties: {
    id: { type: 'integer' },
    updated_at: { type: 'string', format: 'date-time' },
    amount: { type: ['null', 'number'], exclusiveMaximum: true, maximum: 10000000000, multipleOf: 0.01, exclusiveMinimum: true, minimum: -10000000000 },
  },
};
const group = config.group ?? 40;
const every = config.state_every ?? 15;
const stamp = (g) => new Date(Date.UTC(2024, 0, 1, 0, 0, g)).toISOString().replace('.000Z', '.000001Z');
const bookmark = state.bookmarks?.events?.updated_at;
out(JSON.stringify({ type: 'SCHEMA', stream: 'events', schema, key_properties: ['id'], bookmark_properties: ['updated_at'] }));
// Ids 1..count; id i belongs to group floor((i-1)/G); inside a group the ids go in a scrambled order.
const records = [];
for (let g = 0; g * group < config.count; g += 1) {
  const ids = [];
  for (let i = g * group + 1; i <= Math.min((g + 1) * group, config.count); i += 1) ids.push(i);
  ids.sort((a, b) => ((a * 7919) % 101) - ((b * 7919) % 101) || a - b);
  for (const id of ids) records.push({ id, updated_at: stamp(g) });
}
let written = 0;
let last = bookmark;
for (const r of records) {
  if (bookmark !== undefined && r.updated_at < bookmark) continue;
  if (config.crash_after !== undefined && written >= config.crash_after) {
    process.stderr.write(`tap-groups: simulated failure after ${written} records\n`);
    process.exit(3);
  }
  out(`{"type":"RECORD","stream":"events","record":{"id":${r.id},"updated_at":"${r.updated_at}","amount":${r.id}.${String(r.id % 100).padStart(2, '0')}}}`);
  written += 1;
  last = r.updated_at;
  if (written % every === 0) out(JSON.stringify({ type: 'STATE', value: { bookmarks: { events: { updated_at: last } } } }));
}
out(JSON.stringify({ type: 'STATE', value: { bookmarks: { events: { updated_at: last ?? null } } } }));
