#!/usr/bin/env node
// A Singer tap with the bad manners real taps have, each switched on by its config:
//   count N          ids 1..N; id i has updated_at second floor((i-1)/group) (group default 1)
//   order            'sorted' (default) or 'shuffled': records in a fixed scrambled order, not by updated_at
//   state_every S    a STATE after every S records (default 100)
//   bookmark         'last' (default: the last record's updated_at), 'max' (the highest so far), or 'ahead' (each
//                    STATE is sent before its records: it names the updated_at of the record S places further on)
//   state_form       'plain' (default: bookmarks.events.updated_at) or 'sdk' (replication_key / replication_key_value)
//   crash_after K    exit 1 after K records (after the STATE that follows them, if any)
//   twice_every D    every D-th record is sent a second time right after the next one (a key twice in one read)
//   fetched_at       every record carries fetched_at: the time of this sync (a field that changes on every run)
//   keyless          the SCHEMA names no key_properties
//   amount_bump      added to every record's amount (a corrected upstream value)
//   touch T          ids 1..T were updated upstream: a later updated_at than every other record, amount + 1000
// Every run reads `updated_at >= bookmark`, as most taps do. Stream: events (key id, replication key updated_at).
import { args, config, out, state } from './tap-io.mjs';

const schema = {
  type: 'object',
  properties: {
    id: { type: 'integer' },
    updated_at: { type: 'string', format: 'date-time' },
    amount: { type: ['null', 'integer'] },
    note: { type: ['null', 'string'] },
    ...(config.fetched_at ? { fetched_at: { type: 'string', format: 'date-time' } } : {}),
  },
};
const keys = config.keyless ? [] : ['id'];
if (args.includes('--discover')) {
  out(JSON.stringify({ streams: [{ tap_stream_id: 'events', stream: 'events', schema, key_properties: keys }] }));
  process.exit(0);
}
const group = config.group ?? 1;
const every = config.state_every ?? 100;
const stamp = (g) => new Date(Date.UTC(2024, 0, 1) + g * 1000).toISOString().replace('.000Z', '.000001Z');
const saved = state.bookmarks?.events;
const bookmark = saved?.replication_key_value ?? saved?.updated_at;
const fetched = new Date().toISOString();
out(JSON.stringify({ type: 'SCHEMA', stream: 'events', schema, key_properties: keys, bookmark_properties: ['updated_at'] }));

const all = [];
const touched = (id) => id <= (config.touch ?? 0);
for (let id = 1; id <= config.count; id += 1) all.push({ id, updated_at: stamp(touched(id) ? Math.ceil(config.count / group) + 1 : Math.floor((id - 1) / group)) });
all.sort((a, b) => (a.updated_at < b.updated_at ? -1 : a.updated_at > b.updated_at ? 1 : a.id - b.id));
if (config.order === 'shuffled') all.sort((a, b) => ((a.id * 7919) % 1009) - ((b.id * 7919) % 1009) || a.id - b.id);
const records = all.filter((r) => bookmark === undefined || r.updated_at >= bookmark);

const stateOf = (value) =>
  JSON.stringify({
    type: 'STATE',
    value: { bookmarks: { events: config.state_form === 'sdk' ? { replication_key: 'updated_at', replication_key_value: value } : { updated_at: value } } },
  });
const line = (r) =>
  JSON.stringify({
    type: 'RECORD',
    stream: 'events',
    record: { ...r, amount: r.id * 10 + (config.amount_bump ?? 0) + (touched(r.id) ? 1000 : 0), note: `n${r.id}`, ...(config.fetched_at ? { fetched_at: fetched } : {}) },
  });

let high = bookmark;
let held;
for (let i = 0; i < records.length; i += 1) {
  const r = records[i];
  if (config.bookmark === 'ahead' && i % every === 0) {
    const ahead = records[Math.min(i + every - 1, records.length - 1)].updated_at;
    out(stateOf(ahead));
  }
  out(line(r));
  if (held !== undefined) {
    out(line(held));
    held = undefined;
  }
  if (config.twice_every !== undefined && (i + 1) % config.twice_every === 0) held = r;
  if (high === undefined || r.updated_at > high) high = r.updated_at;
  const written = i + 1;
  if (written % every === 0 && config.bookmark !== 'ahead') out(stateOf(config.bookmark === 'max' ? high : r.updated_at));
  if (config.crash_after !== undefined && written >= config.crash_after) {
    process.stderr.write(`tap-manners: simulated failure after ${written} records\n`);
    // Exit once everything written so far has reached the pipe (a pipe's writes are asynchronous).
    process.stdout.write('', () => process.exit(1));
    break;
  }
}
if (config.crash_after === undefined || records.length < config.crash_after) {
  if (held !== undefined) out(line(held));
  out(stateOf(high ?? null));
}
