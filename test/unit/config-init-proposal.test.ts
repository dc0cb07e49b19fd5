/** What `tidemark init` proposes per table, and the YAML text it writes reading back as written. */
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { CatalogColumn, CatalogTable } from '../../src/init/catalog.js';
import { pipelineYaml, proposeStreams, scalar } from '../../src/init/proposal.js';

const column = (name: string, kind: CatalogColumn['kind'], increasing = false): CatalogColumn => ({ name, type: kind, kind, increasing });
const table = (name: string, columns: CatalogColumn[], primaryKey: string[], schema?: string): CatalogTable => ({ name, columns, primaryKey, ...(schema ? { schema } : {}) });

describe('init proposals', () => {
  it('takes the most telling update timestamp, never a timestamp of another meaning or a text column', () => {
    const [p] = proposeStreams([table('t', [column('id', 'integer', true), column('created_at', 'timestamp'), column('Modified', 'timestamp'), column('updated_at', 'other'), column('lastModified', 'timestamp')], ['id'])]);
    expect(p).toMatchObject({ cursor: 'lastModified', strategy: 'incremental', primaryKey: ['id'] });
  });

  it('falls back to an increasing single-column key, then to a full read', () => {
    const [serial, plainKey, composite] = proposeStreams([
      table('a', [column('id', 'integer', true), column('created', 'timestamp')], ['id']),
      table('b', [column('id', 'integer', false)], ['id']),
      table('c', [column('x', 'integer', true), column('y', 'integer')], ['x', 'y']),
    ]);
    expect(serial).toMatchObject({ cursor: 'id', strategy: 'incremental' });
    expect(plainKey).toMatchObject({ strategy: 'full' });
    expect(plainKey!.cursor).toBeUndefined();
    expect(composite).toMatchObject({ strategy: 'full', primaryKey: ['x', 'y'] });
  });

  it('names a stream apart only where two schemas share a table name, keeping the public one plain', () => {
    const streams = proposeStreams([table('orders', [], [], 'public'), table('orders', [], [], 'audit'), table('items', [], [], 'audit')]);
    expect(streams.map((s) => [s.table, s.name])).toEqual([['public.orders', undefined], ['audit.orders', 'audit_orders'], ['audit.items', undefined]]);
  });

  it('writes YAML that reads back as the proposal, odd names quoted', () => {
    const streams = proposeStreams([table('order lines', [column('yes', 'timestamp'), column('updated_at', 'timestamp')], ['no', 'id: 1'])]);
    const text = pipelineYaml({ name: 'shop', source: ['  type: sqlite', '  path: ./a.db'], destination: ['  type: duckdb'], described: 'SQLite a.db', streams, schemaRef: './tidemark.schema.json' });
    expect(parse(text)).toEqual({ name: 'shop', source: { type: 'sqlite', path: './a.db' }, streams: [{ table: 'order lines', primary_key: ['no', 'id: 1'], cursor: 'updated_at' }], destination: { type: 'duckdb' } });
    expect(['true', '5', 'a: b', '#x', 'plain_name', './x.db'].map(scalar)).toEqual(['"true"', '"5"', '"a: b"', '"#x"', 'plain_name', './x.db']);
  });
});

describe('init sources', () => {
  it('never writes a password into the file: the URL reads it from the variable its client uses', async () => {
    const { initSource, initDestination } = await import('../../src/init/init-sources.js');
    const pg = initSource('postgres://reader:s3cr%2Ft@db.internal:5432/shop', '/work/p/shop.yaml');
    expect(pg).toMatchObject({ defaultName: 'shop', passwordVariable: 'PGPASSWORD', described: 'postgres://reader@db.internal:5432/shop', catalog: { url: 'postgres://reader:s3cr%2Ft@db.internal:5432/shop' } });
    expect(pg.yaml).toEqual(['  type: postgres', '  url: "postgres://reader:${env:PGPASSWORD}@db.internal:5432/shop"']);
    const maria = initSource('mariadb://root@127.0.0.1:3306/app', '/work/p/shop.yaml');
    expect(maria.yaml).toEqual(['  type: mariadb', '  url: mysql://root@127.0.0.1:3306/app']);
    expect(maria.passwordVariable).toBeUndefined();
    expect(initDestination('sqlite:/work/out/w.db', '/work/p/shop.yaml').yaml[1]).toBe('  path: ../out/w.db   # relative to this file');
    expect(initDestination('postgres://w:pw@h/dw?schema=raw', '/work/p/shop.yaml').yaml).toEqual(['  type: postgres', '  url: "postgres://w:${env:PGPASSWORD}@h/dw"', '  schema: raw']);
  });
});
