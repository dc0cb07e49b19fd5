/**
 * A response body as text, decoded by the charset its `Content-Type` declares. `fetch`'s `text()` always decodes
 * UTF-8 and turns every other byte into U+FFFD, so a Latin-1 `café` would arrive as `caf\uFFFD` without a word.
 */
import { TextDecoder } from 'node:util';
import { SourceError } from '../../core/errors.js';
import { decodeUtf8 } from '../../shared/utf8-text.js';

/** The `charset` parameter of a Content-Type header, lower-cased; undefined when there is none. */
export function declaredCharset(contentType: string | null): string | undefined {
  const match = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i.exec(contentType ?? '');
  const label = (match?.[1] ?? match?.[2])?.trim().toLowerCase();
  return label === '' ? undefined : label;
}

/**
 * UTF-8 (JSON's own encoding, and the default when none is declared) keeps bytes that are not UTF-8 for the value
 * check to reject, record by record (see decodeUtf8). Labels follow the WHATWG Encoding Standard, as browsers read
 * them: `iso-8859-1`, `latin1` and `us-ascii` mean windows-1252 (0x80 is €). Another charset decodes strictly: an
 * invalid sequence in it, or a charset nobody can decode, stops the read naming the URL and the charset.
 */
export function decodeBody(body: Uint8Array, contentType: string | null, at: string): string {
  const charset = declaredCharset(contentType);
  const text = charset === undefined ? decodeUtf8(body) : decodeAs(charset, body, at);
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

function decodeAs(charset: string, body: Uint8Array, at: string): string {
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(charset, { fatal: true });
  } catch (cause) {
    throw new SourceError(`GET ${at}: the response declares charset ${JSON.stringify(charset)}, which tidemark cannot decode`, {
      cause,
      context: { phase: 'extract', at },
    });
  }
  if (decoder.encoding === 'utf-8') return decodeUtf8(body);
  if (decoder.encoding === 'windows-1252') return decodeWindows1252(body);
  try {
    return decoder.decode(body);
  } catch (cause) {
    throw new SourceError(`GET ${at}: the response is not valid ${charset} (the charset its Content-Type declares)`, { cause, context: { phase: 'extract', at } });
  }
}

/** 0x80–0x9F of windows-1252 (the five bytes it leaves undefined stay C1 controls, as WHATWG says). */
const CP1252_HIGH = '\u20AC\u0081\u201A\u0192\u201E\u2026\u2020\u2021\u02C6\u2030\u0160\u2039\u0152\u008D\u017D\u008F\u0090\u2018\u2019\u201C\u201D\u2022\u2013\u2014\u02DC\u2122\u0161\u203A\u0153\u009D\u017E\u0178';

/** Node 20's decoder for this label reads ISO-8859-1 instead (C1 controls for 0x80–0x9F): decoded here, the same on every Node. */
function decodeWindows1252(body: Uint8Array): string {
  const latin1 = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('latin1');
  return latin1.replace(/[\x80-\x9f]/g, (c) => CP1252_HIGH[c.charCodeAt(0) - 0x80]!);
}
