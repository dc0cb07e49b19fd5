import { describe, expect, it } from 'vitest';
import { ConfigError, parsePipeline, redact } from '../../src/index.js';

const base = (streams: string, extra = '') => `name: shop\nsource: {type: sqlite, path: ./shop.db}\nstreams:\n${streams}\n${extra}`;

describe('pipeline config', () => {
  it("applies defaults: merge with a primary key (or the table's own), append without, replace for full; paths relative to the file", () => {
    const streams = `  - table: main.orders\n    primary_key: id\n    cursor: updated_at\n  - table: events\n    cursor: ts\n  - table: customers\n  - name: recent\n    query: SELECT * FROM events\n    cursor: ts\n  - table: logs\n    cursor: ts\n    write: merge`;
    const p = parsePipeline(base(streams), { file: '/etc/pipes/shop.yaml' });
    expect(p.streams.map((s) => [s.name, s.strategy, s.write, s.sourceKey])).toEqual([
      ['orders', 'incremental', 'merge', undefined],
      ['events', 'incremental', 'merge', 'optional'],
      ['customers', 'full', 'replace', undefined],
      ['recent', 'incremental', 'append', undefined],
      ['logs', 'incremental', 'merge', 'required'],
    ]);
    expect(p.streams[0]!.checkpointRows).toBe(100_000);
    expect(p.source).toMatchObject({ path: '/etc/pipes/shop.db' });
    expect(p.destination).toMatchObject({ type: 'duckdb', path: '/etc/pipes/tidemark.duckdb' });
  });

  it.each([
    [`  - table: t\n    cursor: c\n    lookback: 5m\n    write: append`, /streams\[0\]\.lookback: lookback re-reads rows, so it needs write: merge/],
    [`  - table: t\n    primary_key: [id]\n    cursor: c\n    lookback: 5 minutes`, /streams\[0\]\.lookback: expected a duration with units/],
    [`  - table: t\n    strategy: incremental`, /streams\[0\]\.cursor: strategy incremental needs a cursor/],
    [`  - name: q\n    query: select 1\n    cursor: c\n    write: merge`, /streams\[0\]\.write: write merge needs a primary_key/],
    [`  - table: t\n    cursor: c\n    on_null_cursor: include\n    write: append`, /streams\[0\]\.on_null_cursor: include reads the rows with a NULL cursor on every run, so it needs write: merge/],
    [`  - table: t\n    strategy: full\n    write: append`, /streams\[0\]\.write: strategy full reads the whole source every run and swaps the new table in, so its write is replace \(got append\)/],
    [`  - table: t\n    strategy: full\n    write: merge`, /streams\[0\]\.write: strategy full .* \(got merge\).*strategy: incremental/],
    [`  - table: t\n    primary_key: id\n    strategy: full\n    write: merge`, /streams\[0\]\.write: strategy full .* \(got merge\)/],
    [`  - query: select 1`, /streams\[0\]\.name: a stream defined by a query needs a name/],
    [`  - table: t\n    cursor: c\n    bogus: 1`, /streams\[0\]/],
    [`  - table: t\n  - table: t`, /stream t appears twice/],
  ])('refuses %j with a dot-path', (streams, message) => {
    expect(() => parsePipeline(base(streams), { file: 'p.yaml' })).toThrow(message);
    expect(() => parsePipeline(base(streams), { file: 'p.yaml' })).toThrow(ConfigError);
  });

  it('refuses pipeline names that could escape a directory', () => {
    expect(() => parsePipeline(base('  - table: t').replace('name: shop', 'name: ../etc'))).toThrow(/name/);
  });

  it('resolves ${env:…}, names a missing variable, and never prints the value', () => {
    const text = base('  - table: t').replace('./shop.db', '"${env:TM_SECRET_PATH}"');
    expect(() => parsePipeline(text, { env: {} })).toThrow(/TM_SECRET_PATH is not set/);
    const p = parsePipeline(text, { env: { TM_SECRET_PATH: '/very/secret/location.db' } });
    expect(p.source).toMatchObject({ path: '/very/secret/location.db' });
    expect(redact('opening /very/secret/location.db failed')).toBe('opening *** failed');
  });

  it('reports YAML syntax errors with a line', () => {
    expect(() => parsePipeline('name: [unclosed\n', { file: 'p.yaml' })).toThrow(/p\.yaml:\d+:\d+: invalid YAML/);
  });

  it('refuses a YAML alias bomb', () => {
    const bomb = `a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n`;
    expect(() => parsePipeline(bomb)).toThrow(ConfigError);
  });
});

describe('HTTP lag', () => {
  const http = (extra: string) =>
    parsePipeline(`name: api\nsource: {type: http, base_url: "http://127.0.0.1:1"${extra}}\nstreams:\n  - name: orders\n    path: /orders\n    cursor: updated_at\n    primary_key: id\n`);
  it('defaults to one second (an API stamping whole seconds may still add records of the current one); an explicit lag is kept', () => {
    expect(http('').source).toMatchObject({ lag: '1s' });
    expect(http(', lag: 0s').source).toMatchObject({ lag: '0s' });
  });
});
