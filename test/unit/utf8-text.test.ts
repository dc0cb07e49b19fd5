import { describe, expect, it } from 'vitest';
import { decodeUtf8 } from '../../src/shared/utf8-text.js';
import { ValueRejection, coerceValue } from '../../src/core/values.js';

const bytes = (...b: number[]) => Buffer.from(b);

describe('decodeUtf8', () => {
  it('decodes valid UTF-8 as usual, 1- to 4-byte sequences included', () => {
    const text = 'café ✓ 𝄞 tide';
    expect(decodeUtf8(Buffer.from(text))).toBe(text);
  });

  it('keeps each byte that is not valid UTF-8 as U+DC80–U+DCFF instead of U+FFFD', () => {
    expect(decodeUtf8(bytes(0x63, 0x61, 0x66, 0xe9))).toBe('caf\udce9');
    // Overlong "/", an encoded surrogate (ED A0 80), a truncated 3-byte sequence, a code point above U+10FFFF.
    expect(decodeUtf8(bytes(0xc0, 0xaf))).toBe('\udcc0\udcaf');
    expect(decodeUtf8(bytes(0xed, 0xa0, 0x80))).toBe('\udced\udca0\udc80');
    expect(decodeUtf8(bytes(0xe2, 0x9c, 0x41))).toBe('\udce2\udc9cA');
    expect(decodeUtf8(bytes(0xf4, 0x90, 0x80, 0x80))).toBe('\udcf4\udc90\udc80\udc80');
    expect(decodeUtf8(bytes(0xe9, 0xe2, 0x9c, 0x93))).toBe('\udce9✓');
  });

  it('a text value holding such a byte is rejected naming the byte; a JSON value too', () => {
    expect(() => coerceValue({ kind: 'text' }, 'caf\udce9')).toThrow(new ValueRejection('text is not valid UTF-8: byte 0xE9 at character 4 of text "caf\\udce9"'));
    expect(() => coerceValue({ kind: 'json' }, '{"a":"caf\udce9"}')).toThrow(/byte 0xE9/);
    expect(() => coerceValue({ kind: 'text' }, 'x\ud800')).toThrow(/lone surrogate U\+D800/);
    expect(coerceValue({ kind: 'text' }, 'clef 𝄞')).toBe('clef 𝄞');
  });
});
