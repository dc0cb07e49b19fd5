import { describe, expect, it } from 'vitest';
import { LineBuffer, type RowPacket } from '../../src/sources/mysql/mysql-bulk.js';

/** A binary-protocol row packet of length-coded values (none NULL), as mysql2 hands it over. */
function packet(values: readonly Buffer[]): RowPacket {
  const lengthCoded = (v: Buffer): Buffer => {
    if (v.length < 0xfb) return Buffer.concat([Buffer.from([v.length]), v]);
    const n = Buffer.alloc(4);
    n[0] = 0xfd;
    n.writeUIntLE(v.length, 1, 3);
    return Buffer.concat([n, v]);
  };
  const bitmap = Buffer.alloc((values.length + 9) >> 3);
  const buffer = Buffer.concat([Buffer.alloc(4), Buffer.from([0]), bitmap, ...values.map(lengthCoded)]);
  let offset = 4;
  return {
    buffer,
    end: buffer.length,
    get offset() {
      return offset;
    },
    set offset(at: number) {
      offset = at;
    },
    readLengthCodedNumber() {
      const first = buffer[offset]!;
      offset += 1;
      if (first !== 0xfd) throw new Error('only 3-byte lengths here');
      const n = buffer.readUIntLE(offset, 3);
      offset += 3;
      return n;
    },
  };
}

describe('MySQL bulk lines', () => {
  it('writes the rest of a row whole after a long text whose doubled quotes fill the buffer to its last bytes', () => {
    const lines = new LineBuffer(['text', 'values']);
    // The buffer starts at 2 MiB: 1,048,574 quotes become 2,097,150 bytes between quotes, 2 bytes short of its end.
    const quotes = Buffer.alloc(1_048_574, '"');
    expect(lines.appendRow(packet([quotes, Buffer.from('0123456789')]))).toBe(true);
    const line = lines.take();
    expect(line.length).toBe(2 * quotes.length + 2 + 1 + 10 + 1);
    expect(line.subarray(-13).toString()).toBe('",0123456789\n');
    expect(line.subarray(0, 2 * quotes.length + 2).every((b) => b === 0x22)).toBe(true);
  });

  it('quotes short text, copies values, and leaves a NULL field empty', () => {
    const lines = new LineBuffer(['values', 'text', 'text']);
    const row = packet([Buffer.from('1,2'), Buffer.from('a"b'), Buffer.from('')]);
    expect(lines.appendRow(row)).toBe(true);
    expect(lines.take().toString()).toBe('1,2,"a""b",""\n');
  });

  it('refuses a result whose column is no longer of a type sent in binary (the table changed since it was described)', () => {
    const lines = new LineBuffer(['text', 'binary']);
    expect(lines.describe([{ columnType: 253 }, { columnType: 5, flags: 0 }])).toBeUndefined();
    // The DOUBLE became a DECIMAL: its bytes are a length-coded string now, which must not be read as 8 bytes.
    expect(lines.describe([{ columnType: 253 }, { columnType: 246, flags: 0 }])).toBe('column 2 of the bulk read changed type while it was read; run again');
  });
});
