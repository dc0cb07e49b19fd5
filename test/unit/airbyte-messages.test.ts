import { describe, expect, it } from 'vitest';
import { airbyteColumnType, parseAirbyteMessage, schemaFromCatalog, catalogStreams } from '../../src/sources/airbyte/airbyte-messages.js';
import { JsonNumber, parseExactJson } from '../../src/shared/exact-json.js';
import { exportAirbyteState, importAirbyteState } from '../../src/engine/airbyte-state.js';
import type { PipelineState } from '../../src/core/types.js';

const parse = (message: unknown) => parseAirbyteMessage(typeof message === 'string' ? message : JSON.stringify(message), 'c', 1);

describe('Airbyte messages', () => {
  it('keeps record numbers exact', () => {
    const m = parse('{"type":"RECORD","record":{"stream":"s","namespace":"n","emitted_at":1,"data":{"id":123456789012345678901234567890,"x":0.1000000000000000000001}}}');
    expect(m).toMatchObject({ type: 'RECORD', stream: 's', namespace: 'n' });
    const data = (m as { data: Record<string, JsonNumber> }).data;
    expect(data.id!.text).toBe('123456789012345678901234567890');
    expect(data.x!.text).toBe('0.1000000000000000000001');
  });

  it('reads the three state types and their recordCount; the resume token is what --state takes back', () => {
    const stream = { stream_descriptor: { name: 's' }, stream_state: { c: 1 } };
    expect(parse({ type: 'STATE', state: { type: 'STREAM', stream, sourceStats: { recordCount: 10.0 } } })).toEqual({
      type: 'STATE',
      kind: 'STREAM',
      stream: 's',
      resume: [{ type: 'STREAM', stream }],
      recordCount: 10,
    });
    const global = { shared_state: { lsn: 5 }, stream_states: [stream] };
    expect(parse({ type: 'STATE', state: { type: 'GLOBAL', global } })).toEqual({ type: 'STATE', kind: 'GLOBAL', resume: [{ type: 'GLOBAL', global }] });
    expect(parse({ type: 'STATE', state: { type: 'LEGACY', data: { s: { c: 2 } } } })).toEqual({ type: 'STATE', kind: 'LEGACY', resume: { s: { c: 2 } } });
    // Older connectors send legacy state without a type.
    expect(parse({ type: 'STATE', state: { data: { s: 3 } } })).toMatchObject({ kind: 'LEGACY', resume: { s: 3 } });
    expect(() => parse({ type: 'STATE', state: { type: 'STREAM' } })).toThrow(/STATE message without a valid state.stream/);
    expect(() => parse({ type: 'STATE', state: { type: 'WEIRD' } })).toThrow(/state.type \(WEIRD\)/);
  });

  it('reads LOG, TRACE (error, estimate, stream_status), CONTROL and the command replies', () => {
    expect(parse({ type: 'LOG', log: { level: 'WARN', message: 'careful' } })).toEqual({ type: 'LOG', level: 'WARN', message: 'careful' });
    expect(parse({ type: 'TRACE', trace: { type: 'ERROR', emitted_at: 1, error: { message: 'boom', internal_message: 'x', stack_trace: 'at y', failure_type: 'config_error' } } })).toEqual({
      type: 'TRACE_ERROR',
      message: 'boom',
      internal: 'x',
      stack: 'at y',
      failureType: 'config_error',
    });
    expect(parse({ type: 'TRACE', trace: { type: 'ESTIMATE', estimate: { name: 's', type: 'STREAM', row_estimate: 42 } } })).toEqual({ type: 'TRACE_ESTIMATE', stream: 's', rows: 42 });
    expect(parse({ type: 'TRACE', trace: { type: 'STREAM_STATUS', stream_status: { stream_descriptor: { name: 's' }, status: 'COMPLETE' } } })).toEqual({ type: 'TRACE_STATUS', stream: 's', status: 'COMPLETE' });
    expect(parse({ type: 'CONTROL', control: { type: 'CONNECTOR_CONFIG', connectorConfig: { config: { token: 't2' } } } })).toEqual({ type: 'CONTROL_CONFIG', config: { token: 't2' } });
    expect(parse({ type: 'CONNECTION_STATUS', connectionStatus: { status: 'FAILED', message: 'no' } })).toEqual({ type: 'CONNECTION_STATUS', status: 'FAILED', message: 'no' });
    expect(parse({ type: 'SOMETHING_NEW' })).toEqual({ type: 'OTHER', name: 'SOMETHING_NEW' });
    expect(parse('   ')).toBeUndefined();
  });

  it('refuses lines that are not messages', () => {
    expect(() => parse('hello')).toThrow(/c line 1 is not a JSON Airbyte message .*: hello/);
    expect(() => parse('{"record":{}}')).toThrow(/not an Airbyte message \(no "type"\)/);
    expect(() => parse({ type: 'RECORD', record: { data: {} } })).toThrow(/RECORD message without a valid record.stream/);
  });
});

describe('Airbyte types', () => {
  const type = (schema: unknown) => airbyteColumnType(parseExactJson(JSON.stringify(schema))).type;
  it('maps airbyte_type and the v1 well-known types', () => {
    expect(type({ type: 'number', airbyte_type: 'integer' })).toEqual({ kind: 'int64' });
    expect(type({ type: 'number', airbyte_type: 'big_integer' })).toEqual({ kind: 'decimal', precision: 38, scale: 0 });
    expect(type({ type: 'string', airbyte_type: 'big_integer' })).toEqual({ kind: 'decimal', precision: 38, scale: 0 });
    expect(type({ type: 'string', format: 'date-time', airbyte_type: 'timestamp_with_timezone' })).toEqual({ kind: 'timestamptz' });
    expect(type({ type: 'string', format: 'date-time', airbyte_type: 'timestamp_without_timezone' })).toEqual({ kind: 'timestamp' });
    expect(type({ type: 'string', format: 'time', airbyte_type: 'time_without_timezone' })).toEqual({ kind: 'time' });
    expect(type({ type: 'number' })).toEqual({ kind: 'decimal' });
    expect(type({ $ref: 'WellKnownTypes.json#/definitions/Integer' })).toEqual({ kind: 'int64' });
    expect(type({ $ref: 'WellKnownTypes.json#/definitions/TimestampWithTimezone' })).toEqual({ kind: 'timestamptz' });
    expect(type({ oneOf: [{ type: 'null' }, { $ref: 'WellKnownTypes.json#/definitions/Number' }] })).toEqual({ kind: 'decimal' });
    expect(type({ type: 'object', properties: {} })).toEqual({ kind: 'json' });
  });

  it("takes the source's key and cursor unless the stream sets its own", () => {
    const [entry] = catalogStreams(
      parseExactJson(
        JSON.stringify({
          streams: [{ name: 'o', json_schema: { properties: { id: { type: 'integer' }, at: { type: 'string' } } }, supported_sync_modes: ['incremental'], default_cursor_field: ['at'], source_defined_primary_key: [['id']] }],
        }),
      ),
    );
    expect(schemaFromCatalog('o', entry!, [], undefined)).toMatchObject({ primaryKey: ['id'], cursor: 'at' });
    expect(schemaFromCatalog('o', entry!, ['at'], 'id')).toMatchObject({ primaryKey: ['at'], cursor: 'id' });
  });
});

describe('Airbyte state files', () => {
  const streams = [
    { name: 'a', strategy: 'incremental' as const, primaryKey: [] },
    { name: 'b', strategy: 'incremental' as const, primaryKey: [] },
  ];
  const empty: PipelineState = { pipeline: 'p', version: 1, streams: {} };
  it('round-trips STREAM, GLOBAL and LEGACY state', () => {
    const perStream = [
      { type: 'STREAM', stream: { stream_descriptor: { name: 'a' }, stream_state: { c: 1 } } },
      { type: 'STREAM', stream: { stream_descriptor: { name: 'b' }, stream_state: { c: 2 } } },
    ];
    const imported = importAirbyteState(perStream, streams, empty);
    expect(imported.streams.a!.resume).toEqual([perStream[0]]);
    expect(exportAirbyteState(imported)).toEqual(perStream);
    const global = [{ type: 'GLOBAL', global: { shared_state: { lsn: 9 }, stream_states: [{ stream_descriptor: { name: 'a' }, stream_state: { c: 1 } }] } }];
    expect(exportAirbyteState(importAirbyteState(global, streams, empty))).toEqual(global);
    const legacy = { a: { c: 1 }, b: { c: 2 } };
    expect(exportAirbyteState(importAirbyteState(legacy, streams, empty))).toEqual(legacy);
    expect(() => importAirbyteState([{ type: 'STREAM', stream: { stream_descriptor: { name: 'zz' } } }], streams, empty)).toThrow(/stream zz, which this pipeline does not read/);
  });
});
