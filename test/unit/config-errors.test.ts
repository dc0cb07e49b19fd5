/** Schema errors a user reads: one line, the file once, the dot-path, what is expected, a "did you mean". */
import { describe, expect, it } from 'vitest';
import { closest } from '../../src/config/config-issues.js';
import { ConfigError, parsePipeline } from '../../src/index.js';

const pipeline = (body: string) => `name: shop\nsource: {type: sqlite, path: ./shop.db}\n${body}`;
const messageOf = (text: string, env: NodeJS.ProcessEnv = {}): string => {
  try {
    parsePipeline(text, { file: 'p.yaml', env });
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).describe();
  }
  throw new Error('expected a config error');
};

describe('config errors', () => {
  it.each([
    ['an unknown key, with the key in the path and the key meant', pipeline('streams:\n  - table: t\n    cursor_column: x'), 'p.yaml: streams[0].cursor_column: unknown key; did you mean cursor?'],
    ['a typo in a key', 'name: s\nsource: {type: postgres, url: "postgres://h/d", prot: 5}\nstreams: [{table: t}]', 'p.yaml: source.prot: unknown key; did you mean port?'],
    ['an unknown state store, with the allowed types', pipeline('state: {type: sqlit, path: s.db}\nstreams: [{table: t}]'), 'p.yaml: state.type: unknown type "sqlit"; expected one of file, sqlite, postgres, bucket; did you mean sqlite?'],
    ['a primary key of the wrong type', pipeline('streams:\n  - table: t\n    primary_key: 5'), 'p.yaml: streams[0].primary_key: expected a string or a list of strings, got 5'],
    ['an enum value, with the allowed values', pipeline('streams:\n  - table: t\n    strategy: incremntal'), 'p.yaml: streams[0].strategy: "incremntal" is not allowed; expected one of incremental, full, partitioned, log; did you mean incremental?'],
    ['a state that is neither destination nor a store', pipeline('state: destinaton\nstreams: [{table: t}]'), 'p.yaml: state: expected "destination" or "none" or a map with type: file | sqlite | postgres | bucket, got "destinaton"; did you mean destination?'],
    ['a source type', 'name: s\nsource: {type: postgre, url: "postgres://h/d"}\nstreams: [{table: t}]', 'p.yaml: source.type: unknown type "postgre"; expected one of sqlite, postgres, mysql, mariadb, files, http, singer, airbyte, code; did you mean postgres?'],
    ['a key of the postgres branch checked against postgres, not sqlite', 'name: s\nsource: {type: postgres, url: "postgres://h/d", path: x.db}\nstreams: [{table: t}]', 'p.yaml: source.path: unknown key (allowed keys: type, url, host, port, user, password, database, max_skew, read_timeout)'],
    ['an empty list', pipeline('streams: []'), 'p.yaml: streams: needs at least 1 entry'],
    ['a number out of range', pipeline('streams:\n  - table: t\n    checkpoint_rows: -5'), 'p.yaml: streams[0].checkpoint_rows: expected a number > 0, got -5'],
    ['an unknown query placeholder', pipeline('streams:\n  - name: q\n    query: "SELECT * FROM t WHERE c > {{start}}"\n    cursor: c'), 'p.yaml: streams[0].query: {{start}} is not a query placeholder (use {{since}} or {{until}})'],
    ['a quoted query placeholder', pipeline("streams:\n  - name: q\n    query: \"SELECT * FROM t WHERE c > '{{since}}'\"\n    cursor: c"), 'p.yaml: streams[0].query: {{since}} is bound as a value: write it without quotes'],
    ['a query window without a cursor', pipeline('streams:\n  - name: q\n    query: "SELECT * FROM t WHERE c > {{since}}"'), 'p.yaml: streams[0].query: {{since}} and {{until}} are values of the cursor column; set cursor:'],
    ['a nested union member', pipeline('streams:\n  - table: t\n    pagination: {type: page, sise: 3}'), 'p.yaml: streams[0].pagination.sise: unknown key; did you mean size?'],
  ])('%s', (_what, text, expected) => {
    const message = messageOf(text);
    expect(message).toBe(expected);
    expect(message).not.toContain('\n');
    expect(message).not.toContain('Invalid input');
  });

  it('suggests only words close enough to be meant', () => {
    expect(closest('cursor_column', ['cursor', 'columns', 'table'])).toBe('cursor');
    expect(closest('stratgy', ['strategy', 'write'])).toBe('strategy');
    expect(closest('banana', ['strategy', 'write', 'table'])).toBeUndefined();
  });
});

describe('${env:…} in numbers and booleans', () => {
  it('coerces an interpolated value where the schema expects a number or a boolean', () => {
    const text = 'name: s\nsource: {type: postgres, host: h, port: "${env:PGPORT}", database: d}\nstreams:\n  - table: t\n    cursor: c\n    checkpoint_rows: "${env:ROWS}"';
    const p = parsePipeline(text, { file: 'p.yaml', env: { PGPORT: '6543', ROWS: '5000' } });
    expect(p.source).toMatchObject({ port: 6543 });
    expect(p.streams[0]!.checkpointRows).toBe(5000);
    const http = 'name: s\nsource: {type: http, base_url: "https://api.example.com"}\nstreams:\n  - path: /orders\n    cursor: updated_at\n    primary_key: id\n    ordered: "${env:ORDERED}"';
    expect(parsePipeline(http, { file: 'p.yaml', env: { ORDERED: 'true' } }).streams[0]!.http?.ordered).toBe(true);
  });

  it('keeps text where the schema expects text, and names a value that is not a number', () => {
    const text = 'name: s\nsource: {type: postgres, host: h, port: "${env:PGPORT}", database: "${env:DB}"}\nstreams: [{table: t}]';
    expect(parsePipeline(text, { file: 'p.yaml', env: { PGPORT: '5432', DB: '42' } }).source).toMatchObject({ port: 5432, database: '42' });
    expect(messageOf(text, { PGPORT: 'five', DB: 'd' })).toBe('p.yaml: source.port: expected an integer, got "five"');
  });

  it('does not coerce text that came from the file itself', () => {
    expect(messageOf('name: s\nsource: {type: postgres, host: h, port: "5432", database: d}\nstreams: [{table: t}]')).toBe('p.yaml: source.port: expected an integer, got "5432"');
  });
});

describe('sync: on HTTP streams', () => {
  const http = (stream: string) => `name: s\nsource: {type: http, base_url: "https://api.example.com"}\nstreams:\n  - path: /contacts\n${stream}`;
  it('makes a stream incremental without a cursor, by the token or the delta link', () => {
    const token = parsePipeline(http('    primary_key: id\n    sync: {token: next_sync_token, param: sync_token, deleted: deleted}'), { file: 'p.yaml', env: {} }).streams[0]!;
    expect(token).toMatchObject({ strategy: 'incremental', write: 'merge', http: { sync: { token: 'next_sync_token', param: 'sync_token', deleted: 'deleted' } } });
    expect(token.cursor).toBeUndefined();
    const url = parsePipeline(http('    sync: {url: "@odata.deltaLink"}'), { file: 'p.yaml', env: {} }).streams[0]!;
    expect(url).toMatchObject({ strategy: 'incremental', write: 'append', http: { sync: { url: '@odata.deltaLink' } } });
  });
  it.each([
    ['a cursor beside the token', '    cursor: updated_at\n    sync: {token: t, param: p}', 'p.yaml: streams[0].cursor: a sync stream\'s position is the API\'s sync token, not a cursor column; drop cursor: or sync:'],
    ['removals on an append stream', '    sync: {url: d, deleted: "@removed"}', 'p.yaml: streams[0].sync.deleted: removed records are deleted from a table merged on its key; set write: merge with a primary_key, or drop deleted: to load the removal records as rows'],
    ['strategy full', '    strategy: full\n    sync: {url: d}', "p.yaml: streams[0].strategy: sync: makes the stream incremental by the API's token; drop strategy: full"],
    ['an incremental stream with neither', '    strategy: incremental', "p.yaml: streams[0].cursor: strategy incremental needs a cursor column (or sync: when the API's position is a sync token or delta link)"],
  ])('refuses %s', (_what, stream, expected) => {
    expect(messageOf(http(stream))).toBe(expected);
  });
});
