import { describe, expect, it } from 'vitest';
import { compilePattern } from '../../src/sources/files/file-pattern.js';

describe('file patterns', () => {
  it('`**/` stands for whole directories, never part of a file name', () => {
    const p = compilePattern('trips/**/t_{month}.csv');
    expect(p.partitionOf('trips/t_2024-01.csv')).toBe('2024-01');
    expect(p.partitionOf('trips/a/b/t_2024-02.csv')).toBe('2024-02');
    expect(p.partitionOf('trips/a/direct_2024-03.csv')).toBeUndefined();
    expect(p.partitionOf('trips/direct_2024-03.csv')).toBeUndefined();
  });

  it('names the captures that fill a Hive-style directory of their own name', () => {
    expect(compilePattern('trips/month={month}/*.parquet').hiveKeys).toEqual(['month']);
    expect(compilePattern('trips/m={month}/*.parquet').hiveKeys).toEqual([]);
    expect(compilePattern('trips/{month}.parquet').hiveKeys).toEqual([]);
  });
});
