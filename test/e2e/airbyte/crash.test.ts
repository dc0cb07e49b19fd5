/**
 * Exactly once through `tidemark airbyte-destination write` in every destination: a long message stream, the write
 * killed -9 mid-way (failpoints), then restarted with the stream after the last STATE it echoed — what the Airbyte
 * platform resends — must leave each table holding every record once: appended, deduplicated and overwritten.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../../helpers/fs.js';
import { airbyte, catalog, globalState, joined, KINDS, legacyState, record, resendAfter, states, streamState, warehouse, type CatalogEntry, type Kind } from './helpers.js';
import { sweepPoints } from '../../helpers/sweep.js';

let root: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir: root, cleanup } = await tempDir('tidemark-airbyte-crash-')));
afterAll(() => cleanup());

/** A lake has no merge: its people stream appends. */
const entries = (kind: Kind): CatalogEntry[] => [
  { name: 'events', mode: 'append', properties: { id: { type: 'integer' }, seq: { type: 'number', airbyte_type: 'integer' }, amount: { type: 'number' } } },
  { name: 'people', mode: kind === 'files' ? 'append' : 'append_dedup', properties: { id: { type: 'integer' }, v: { type: 'integer' }, name: { type: 'string' } }, primaryKey: ['id'], cursor: 'v' },
  { name: 'snap', mode: 'overwrite', properties: { id: { type: 'integer' } }, primaryKey: ['id'] },
];

const RECORDS = 150;
const STATE_EVERY = 6;

/** Records of three streams, a STATE every 6 records rotating through STREAM, GLOBAL and LEGACY (typed or not). */
function input(): string[] {
  const lines: string[] = [];
  for (let i = 1; i <= RECORDS; i += 1) {
    if (i % 3 === 0) lines.push(record('events', `{"id":${i},"seq":${9007199254740993n + BigInt(i)},"amount":123456789012345678.${String(i).padStart(4, "0")}1}`));
    else if (i % 3 === 1) lines.push(record('people', `{"id":${i % 7},"v":${i},"name":"p${i}"}`));
    else lines.push(record('snap', `{"id":${i}}`));
    if (i % STATE_EVERY === 0) {
      const k = (i / STATE_EVERY) % 4;
      lines.push(
        k === 0 ? streamState('events', { i }) : k === 1 ? streamState('people', { i }) : k === 2 ? globalState({ i }, { events: { i }, people: { i } }) : legacyState({ i }, k === 3 && i % 2 === 0),
      );
    }
  }
  return lines;
}

const ids = (f: (i: number) => boolean) => Array.from({ length: RECORDS }, (_, k) => k + 1).filter(f);
const EVENTS = ids((i) => i % 3 === 0).map((i) => `${i}:${9007199254740993n + BigInt(i)}:123456789012345678.${String(i).padStart(4, "0")}1`);
const DEDUPED = [...new Map(ids((i) => i % 3 === 1).map((i) => [i % 7, i])).entries()].sort((a, b) => a[0] - b[0]).map(([id, v]) => `${id}:${v}:p${v}`);
const APPENDED = ids((i) => i % 3 === 1).map((v) => ({ id: v % 7, v })).sort((a, b) => a.id - b.id || a.v - b.v).map(({ id, v }) => `${id}:${v}:p${v}`);
const SNAP = ids((i) => i % 3 === 2).map(String);

/** The points: after a commit, before its echo (the committed-not-echoed window); before a commit; while writing. */
const POINTS = ['load.after_commit=5', 'load.before_commit=8', 'load.after_write=12'];

describe.each(KINDS)('kill -9 into %s', (kind) => {
  // Each point into two of the destinations (all of them under TIDEMARK_SWEEP=all).
  it.each(sweepPoints(POINTS, KINDS.indexOf(kind), KINDS.length))('at %s, then the resend from the last echoed STATE: every record once', async (point) => {
    const dir = join(root, `${kind}-${point.replace(/[=.]/g, '_')}`);
    const pipeline = 'ab';
    const wh = await warehouse(kind, dir, pipeline);
    try {
      const config = join(dir, 'config.json');
      const catalogFile = join(dir, 'catalog.json');
      await writeFile(config, JSON.stringify({ name: pipeline, destination: wh.destination, checkpoint_rows: 15 }));
      await writeFile(catalogFile, catalog(entries(kind)));
      const args = ['write', '--config', config, '--catalog', catalogFile];
      // An earlier sync's generation of the overwrite stream, live until the new one is swapped in.
      const earlier = await airbyte(args, [record('snap', '{"id":9001}'), record('snap', '{"id":9002}'), streamState('snap', { earlier: true })].join('\n'));
      expect(earlier.code, earlier.stdout).toBe(0);

      const lines = input();
      const crashed = await airbyte(args, lines.join('\n') + '\n', { TIDEMARK_FAILPOINTS: `${point}:kill` });
      expect(crashed.signal, crashed.stdout).toBe('SIGKILL');
      const resend = resendAfter(lines, crashed.stdout);
      // State never runs ahead of the data: every event before the last echoed state is committed.
      const before = lines.slice(0, lines.length - resend.lines.length).filter((l) => l.includes('"stream":"events","data"')).length;
      expect((await wh.rows('events', joined('id'))).length).toBeGreaterThanOrEqual(before);
      expect(await wh.rows('snap', joined('id'))).toEqual(['9001', '9002']);

      const resumed = await airbyte(args, resend.lines.join('\n') + '\n');
      expect(resumed.code, resumed.stdout).toBe(0);
      expect(states(resumed.stdout)).toHaveLength(resend.lines.filter((l) => l.startsWith('{"type":"STATE"')).length);

      expect(await wh.rows('events', joined('id', 'seq', 'amount'))).toEqual(EVENTS);
      expect(await wh.rows('people', joined('id', 'v', 'name'), 'id, v')).toEqual(kind === 'files' ? APPENDED : DEDUPED);
      expect(await wh.rows('snap', joined('id'))).toEqual(SNAP);
    } finally {
      await wh.drop();
    }
  });
});
