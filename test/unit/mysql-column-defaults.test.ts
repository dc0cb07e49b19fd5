/**
 * information_schema.COLUMNS defaults as the values rows the binlog never rewrote hold: MariaDB's SQL forms (quoted
 * strings with escapes, NULL, expressions) and MySQL 8's bare literals with DEFAULT_GENERATED expressions, the
 * implicit defaults of NOT NULL columns, and what must be refused. The MariaDB forms run live in
 * test/integration/mysql/mysql-cdc-add-column.test.ts; MySQL 8 is not on this machine, so its forms are checked here.
 */
import { describe, expect, it } from 'vitest';
import type { Column, ColumnType } from '../../src/core/types.js';
import { existingValues, type ColumnDefaultRow } from '../../src/sources/mysql/column-defaults.js';

function one(type: ColumnType, row: Partial<ColumnDefaultRow>, mariadb = true) {
  const column: Column = { name: 'c', type, nullable: true };
  return existingValues([column], [{ name: 'c', dflt: null, nullable: 'YES', dataType: 'int', columnType: 'int(11)', extra: '', ...row }], mariadb).c;
}

describe('existingValues (MySQL/MariaDB column defaults)', () => {
  it('reads MariaDB literals: numbers, quoted strings with their escapes, NULL', () => {
    expect(one({ kind: 'int32' }, { dflt: '7' })).toEqual({ value: 7 });
    expect(one({ kind: 'uint64' }, { dflt: '18446744073709551615', dataType: 'bigint' })).toEqual({ value: 18446744073709551615n });
    expect(one({ kind: 'decimal', precision: 30, scale: 10 }, { dflt: '12345678901234567890.0123456789', dataType: 'decimal' })).toEqual({ value: '12345678901234567890.0123456789' });
    expect(one({ kind: 'text' }, { dflt: `'a\tb\\nc\\\\d''e"f\\Zg'`, dataType: 'varchar' })).toEqual({ value: 'a\tb\nc\\d\'e"f\u001ag' });
    // The one value codec refuses NUL in text, the default too.
    expect(one({ kind: 'text' }, { dflt: `'a\\0b'`, dataType: 'varchar' })).toEqual({ unknown: expect.stringMatching(/NUL/) });
    expect(one({ kind: 'text' }, { dflt: "'NULL'", dataType: 'varchar' })).toEqual({ value: 'NULL' });
    expect(one({ kind: 'int32' }, { dflt: 'NULL' })).toBeUndefined();
    expect(one({ kind: 'int32' }, { dflt: null })).toBeUndefined();
    expect(one({ kind: 'boolean' }, { dflt: "b'1'", dataType: 'bit' })).toEqual({ value: true });
    expect(one({ kind: 'date' }, { dflt: "'2024-02-29'", dataType: 'date' })).toEqual({ value: '2024-02-29' });
  });

  it('gives NOT NULL columns without a default their implicit value', () => {
    expect(one({ kind: 'int32' }, { nullable: 'NO' })).toEqual({ value: 0 });
    expect(one({ kind: 'text' }, { nullable: 'NO', dataType: 'varchar' })).toEqual({ value: '' });
    expect(one({ kind: 'text' }, { nullable: 'NO', dataType: 'enum', columnType: "enum('it''s','b')" })).toEqual({ value: "it's" });
    expect(one({ kind: 'date' }, { nullable: 'NO', dataType: 'date' })).toHaveProperty('unknown');
  });

  it('refuses expression defaults, server-computed columns and TIMESTAMP literals', () => {
    expect(one({ kind: 'float64' }, { dflt: 'rand()', dataType: 'double' })).toEqual({ unknown: expect.stringMatching(/rand\(\)/) });
    expect(one({ kind: 'int32' }, { dflt: '(1 + 1)' })).toHaveProperty('unknown');
    expect(one({ kind: 'timestamp' }, { dflt: 'current_timestamp(6)', dataType: 'datetime' })).toHaveProperty('unknown');
    expect(one({ kind: 'int64' }, { nullable: 'NO', extra: 'auto_increment', dataType: 'bigint' })).toHaveProperty('unknown');
    expect(one({ kind: 'int32' }, { extra: 'STORED GENERATED' })).toHaveProperty('unknown');
    expect(one({ kind: 'timestamptz' }, { dflt: "'2024-01-01 00:00:00.000000'", dataType: 'timestamp' })).toHaveProperty('unknown');
    expect(one({ kind: 'int32' }, { dflt: "'x'" })).toHaveProperty('unknown');
  });

  it('reads MySQL 8 bare literals and refuses its DEFAULT_GENERATED expressions', () => {
    expect(one({ kind: 'text' }, { dflt: "it's", dataType: 'varchar' }, false)).toEqual({ value: "it's" });
    expect(one({ kind: 'int32' }, { dflt: '7' }, false)).toEqual({ value: 7 });
    expect(one({ kind: 'float64' }, { dflt: 'rand()', extra: 'DEFAULT_GENERATED', dataType: 'double' }, false)).toHaveProperty('unknown');
  });
});
