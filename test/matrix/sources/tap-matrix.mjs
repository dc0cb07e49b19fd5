#!/usr/bin/env node
// A Singer tap for the matrix, as most real taps are: it reads `updated_at >= bookmark` (re-sending the bookmark's
// records), in (updated_at, id) order, with a STATE every `state_every` records. Config: {"data": "<rows.jsonl>",
// "state_every": N}. Each line of the data file is a record; a line that is not JSON is passed through as it is
// (a tap writing a broken message).
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
const bookmark = state.bookmarks?.items?.updated_at;
out(JSON.stringify({ type: 'SCHEMA', stream: 'items', schema, key_properties: ['id'], bookmark_properties: ['updated_at'] }));
const lines = readFileSync(config.data, 'utf8').split('\n').filter(Boolean);
let written = 0;
let last = bookmark;
for (const line of lines) {
  const cursor = /"updated_at":"([^"]+)"/.exec(line)?.[1];
  if (bookmark !== undefined && cursor !== undefined && cursor < bookmark) continue;
  out(line.startsWith('{') && line.endsWith('}') ? `{"type":"RECORD","stream":"items","record":${line}}` : line);
  written += 1;
  last = cursor ?? last;
  if (written % config.state_every === 0) out(JSON.stringify({ type: 'STATE', value: { bookmarks: { items: { updated_at: last } } } }));
}
out(JSON.stringify({ type: 'STATE', value: { bookmarks: { items: { updated_at: last ?? null } } } }));
