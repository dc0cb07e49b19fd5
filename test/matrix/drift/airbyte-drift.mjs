#!/usr/bin/env node
// An Airbyte source for the drift cells, reading the same data file as tap-drift.mjs: its catalog (discover) is the
// last SCHEMA line's schema, and `read` sends the records from the state's cursor on (`>=`), with a STREAM state
// every `state_every` records. Records stay text: JSON.parse would round an int64 beyond 2^53.
import { readFileSync } from 'node:fs';
const args = process.argv.slice(2);
const arg = (name) => (args.indexOf(name) >= 0 ? args[args.indexOf(name) + 1] : undefined);
const out = (line) => process.stdout.write(`${line}\n`);
const isSchema = (line) => line.startsWith('{"type":"SCHEMA"');
const spec = { type: 'object', required: ['data'], properties: { data: { type: 'string' }, state_every: { type: 'integer' } } };
const verb = args[0];
if (verb === 'spec') out(JSON.stringify({ type: 'SPEC', spec: { connectionSpecification: spec } }));
else if (verb === 'check') out(JSON.stringify({ type: 'CONNECTION_STATUS', connectionStatus: { status: 'SUCCEEDED' } }));
else if (verb === 'discover') {
  const config = JSON.parse(readFileSync(arg('--config'), 'utf8'));
  const schema = JSON.parse(readFileSync(config.data, 'utf8').split('\n').filter(isSchema).at(-1)).schema;
  const stream = { name: 'items', json_schema: schema, supported_sync_modes: ['full_refresh', 'incremental'], source_defined_cursor: true, default_cursor_field: ['updated_at'], source_defined_primary_key: [['id']] };
  out(JSON.stringify({ type: 'CATALOG', catalog: { streams: [stream] } }));
} else if (verb === 'read') {
  const config = JSON.parse(readFileSync(arg('--config'), 'utf8'));
  const catalog = JSON.parse(readFileSync(arg('--catalog'), 'utf8'));
  const incremental = catalog.streams[0].sync_mode === 'incremental';
  const state = arg('--state') ? JSON.parse(readFileSync(arg('--state'), 'utf8')) : [];
  const bookmark = incremental ? state.find((s) => s.type === 'STREAM')?.stream.stream_state.updated_at : undefined;
  const emit = (cursor, count) =>
    out(JSON.stringify({ type: 'STATE', state: { type: 'STREAM', stream: { stream_descriptor: { name: 'items' }, stream_state: { updated_at: cursor ?? null } }, sourceStats: { recordCount: count } } }));
  let written = 0;
  let since = 0;
  let last = bookmark;
  for (const line of readFileSync(config.data, 'utf8').split('\n').filter(Boolean)) {
    if (isSchema(line)) continue;
    const cursor = /"updated_at":"([^"]+)"/.exec(line)[1];
    if (bookmark !== undefined && cursor < bookmark) continue;
    out(`{"type":"RECORD","record":{"stream":"items","emitted_at":0,"data":${line}}}`);
    written += 1;
    since += 1;
    last = cursor;
    if (written % config.state_every === 0) {
      emit(last, since);
      since = 0;
    }
  }
  emit(last, since);
} else {
  process.stderr.write(`unknown command ${verb}\n`);
  process.exit(2);
}
