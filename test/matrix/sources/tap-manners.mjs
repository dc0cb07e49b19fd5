#!/usr/bin/env node
// A Singer tap that misbehaves as real ones do, for the matrix's manners dimension. It reads the records of a JSONL
// file from its bookmark on (`updated_at >= bookmark`, re-sending the bookmark's records) with a STATE every
// `state_every` records. Config knobs:
// - order: "sorted" ((updated_at, id)) or "shuffled" (an order unrelated to the cursor);
// - bookmark: "last" (the cursor of the last record sent) or "max" (the highest sent so far);
// - state_early: each STATE carries the bookmark of the record `state_every` ahead, before that record is sent;
// - duplicate_every: every Nth record is sent twice in a row;
// - no_state: the tap never sends a STATE;
// - crash_after: the tap exits 1 after this many records.
import { readFileSync } from 'node:fs';
import { args, config, out, state } from '../../integration/singer/taps/tap-io.mjs';

const schema = {
  type: 'object',
  properties: {
    id: { type: 'integer' },
    updated_at: { type: 'string', format: 'date-time' },
    big: { type: ['null', 'integer'] },
    amount: { type: ['null', 'string'] },
    note: { type: ['null', 'string'] },
  },
};
if (args.includes('--discover')) {
  out(JSON.stringify({ streams: [{ tap_stream_id: 'items', stream: 'items', schema, key_properties: ['id'] }] }));
  process.exit(0);
}
const cursorOf = (line) => /"updated_at":"([^"]+)"/.exec(line)[1];
const idOf = (line) => Number(/"id":(\d+)/.exec(line)[1]);
const bookmark = state.bookmarks?.items?.updated_at;
out(JSON.stringify({ type: 'SCHEMA', stream: 'items', schema, key_properties: ['id'], bookmark_properties: ['updated_at'] }));
let lines = readFileSync(config.data, 'utf8').split('\n').filter(Boolean);
if (bookmark !== undefined) lines = lines.filter((l) => cursorOf(l) >= bookmark);
const shuffleKey = (l) => (idOf(l) * 7919) % 10007;
if (config.order === 'shuffled') lines.sort((a, b) => shuffleKey(a) - shuffleKey(b));
const bookmarkState = (value) => out(JSON.stringify({ type: 'STATE', value: { bookmarks: { items: { updated_at: value } } } }));
let sent = 0;
let last = bookmark;
let high = bookmark;
for (let i = 0; i < lines.length; i += 1) {
  const line = lines[i];
  const copies = config.duplicate_every && (i + 1) % config.duplicate_every === 0 ? 2 : 1;
  for (let c = 0; c < copies; c += 1) out(`{"type":"RECORD","stream":"items","record":${line}}`);
  sent += 1;
  if (config.crash_after !== undefined && sent >= config.crash_after) {
    process.stderr.write('tap-manners: the API connection dropped\n');
    process.exit(1);
  }
  last = cursorOf(line);
  if (high === undefined || last > high) high = last;
  if (!config.no_state && sent % config.state_every === 0) {
    if (config.state_early) bookmarkState(cursorOf(lines[Math.min(i + config.state_every, lines.length - 1)]));
    else bookmarkState(config.bookmark === 'max' ? high : last);
  }
}
if (!config.no_state) bookmarkState((config.bookmark === 'max' ? high : last) ?? null);
