#!/usr/bin/env node
// A Singer tap for the drift cells: its data file holds SCHEMA messages and records in order, and it sends them as
// they come (a SCHEMA between records is a schema change mid-stream). It re-sends from its bookmark (`>=`, as most
// taps do), with a STATE every `state_every` records. Config: {"data": "<lines.jsonl>", "state_every": N}.
import { readFileSync } from 'node:fs';
import { args, config, out, state } from '../../integration/singer/taps/tap-io.mjs';
// Records stay text: JSON.parse would turn an int64 beyond 2^53 into a rounded number.
const lines = readFileSync(config.data, 'utf8').split('\n').filter(Boolean);
const isSchema = (line) => line.startsWith('{"type":"SCHEMA"');
if (args.includes('--discover')) {
  const schema = JSON.parse(lines.findLast(isSchema));
  out(JSON.stringify({ streams: [{ tap_stream_id: 'items', stream: 'items', schema: schema.schema, key_properties: ['id'] }] }));
  process.exit(0);
}
const bookmark = state.bookmarks?.items?.updated_at;
let written = 0;
let last = bookmark;
for (const line of lines) {
  if (isSchema(line)) {
    out(line);
    continue;
  }
  const cursor = /"updated_at":"([^"]+)"/.exec(line)[1];
  if (bookmark !== undefined && cursor < bookmark) continue;
  out(`{"type":"RECORD","stream":"items","record":${line}}`);
  written += 1;
  last = cursor;
  if (written % config.state_every === 0) out(JSON.stringify({ type: 'STATE', value: { bookmarks: { items: { updated_at: last } } } }));
}
out(JSON.stringify({ type: 'STATE', value: { bookmarks: { items: { updated_at: last ?? null } } } }));
