/**
 * `state: {type: bucket, singer_document: …}` writes the Singer state document (bookmarks keyed by the tap's stream
 * names, with replication_key and replication_key_value) at a chosen key or at DataSpoc's layout after every commit;
 * a hand edit of its bookmarks is adopted by the next run (a history entry; the tap re-sends from the edited
 * bookmark) or refused naming the key and the stream. Against s3rver, with a real Singer tap (taps/tap-orders.mjs)
 * sending several STATEs per run across small checkpoints.
 */
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cli } from '../../helpers/cli.js';
import { tempDir, writeYaml } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';
import { sqliteQuery } from '../../helpers/warehouse.js';

const TAP = fileURLToPath(new URL('./taps/tap-orders.mjs', import.meta.url));
const stamp = (id: number) => new Date(Date.UTC(2024, 0, 1) + id * 1000).toISOString().replace('.000Z', '.000001Z');

let s3: LocalS3;
beforeAll(async () => {
  s3 = await startS3('tm-singer-doc');
});
afterAll(async () => {
  await s3.stop();
});

let dir: string;
let cleanup: () => Promise<void>;
let prefix: string;
beforeEach(async () => {
  ({ dir, cleanup } = await tempDir());
  prefix = `p${Math.random().toString(36).slice(2, 10)}`;
});
afterEach(() => cleanup());

interface Setup {
  readonly document: string;
  readonly write?: 'merge' | 'append';
}

function pipelineYaml(tap: Record<string, unknown>, setup: Setup): string {
  return `name: shop-orders
source:
  type: singer
  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(TAP)}]
  config: ${JSON.stringify(tap)}
streams:
  - name: shop_orders
    tap_stream: orders
    primary_key: [id]
    write: ${setup.write ?? 'merge'}
    checkpoint_rows: 5
    batch_rows: 3
destination: {type: sqlite, path: ${JSON.stringify(join(dir, 'w.sqlite'))}}
state:
  type: bucket
  location: s3://${s3.bucket}/${prefix}
  endpoint: ${s3.endpoint}
  credentials:
    access_key_id: \${env:TM_S3_KEY}
    secret_access_key: \${env:TM_S3_SECRET}
  lock: {type: file, path: ${JSON.stringify(join(dir, 'locks'))}}
  singer_document: ${setup.document}
`;
}

async function run(tap: Record<string, unknown>, setup: Setup) {
  const config = await writeYaml(dir, 'p.yaml', pipelineYaml(tap, setup));
  const out = await cli(['run', config, '--json'], { env: s3.env });
  return { ...out, config, stream: out.stdout ? JSON.parse(out.stdout).streams?.[0] : undefined };
}

async function getText(key: string): Promise<string | undefined> {
  try {
    const got = await s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: key }));
    return await got.Body!.transformToString();
  } catch (error) {
    if ((error as { name?: string }).name === 'NoSuchKey') return undefined;
    throw error;
  }
}

async function getJson(key: string): Promise<Record<string, any>> {
  const text = await getText(key);
  expect(text, `object ${key}`).toBeDefined();
  return JSON.parse(text!);
}

function rows(): { id: number; amount: number }[] {
  return sqliteQuery(join(dir, 'w.sqlite'), 'SELECT id, amount FROM shop_orders ORDER BY id').map((r) => ({ id: Number(r.id), amount: Number(r.amount) }));
}

async function history(config: string): Promise<{ version: number; reason: string; run_id: string | null }[]> {
  const out = await cli(['state', 'history', '--json', '--config', config], { env: s3.env });
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout);
}

describe('singer_document', () => {
  it.each([
    ['a chosen key', '{key: "singer/{pipeline}.json"}', 'singer/shop-orders.json'],
    ["DataSpoc's layout", '{layout: dataspoc}', '.dataspoc/state/shop-orders/state.json'],
  ])('is written at %s at every commit, keyed by the tap stream, with replication_key and replication_key_value', async (_what, document, key) => {
    const objectKey = `${prefix}/${key}`;
    // A tap that fails after 12 records: the document holds the bookmark of the last commit (checkpoints of 5).
    const crashed = await run({ count: 30, state_every: 5, crash_after: 12 }, { document });
    expect(crashed.code).toBe(1);
    const partial = await getJson(objectKey);
    expect(partial).toEqual({ bookmarks: { orders: { replication_key: 'updated_at', replication_key_value: stamp(10) } } });
    expect(rows().map((r) => r.id)).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));

    const done = await run({ count: 30, state_every: 5 }, { document });
    expect(done.code, done.stderr).toBe(0);
    expect(rows().map((r) => r.id)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    const text = (await getText(objectKey))!;
    // Readable: indented JSON, one bookmark per tap stream.
    expect(text).toContain('\n  "bookmarks": {\n');
    expect(JSON.parse(text)).toEqual({ bookmarks: { orders: { replication_key: 'updated_at', replication_key_value: stamp(30) } } });
    // The tap is given the same document: nothing is re-sent past its bookmark but the bookmark's own record.
    const again = await run({ count: 30, state_every: 5 }, { document });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stream).toMatchObject({ rows_loaded: 0 });
  }, 120_000);

  it('a hand edit of a bookmark is adopted: a history entry, and the tap is run again from the edited bookmark', async () => {
    const document = '{layout: dataspoc}';
    const key = `${prefix}/.dataspoc/state/shop-orders/state.json`;
    const first = await run({ count: 30, state_every: 4 }, { document });
    expect(first.code, first.stderr).toBe(0);
    expect(rows()).toHaveLength(30);

    // As a DataSpoc user does: open the JSON, move the bookmark back to id 12, save it.
    const edited = await getJson(key);
    edited.bookmarks.orders.replication_key_value = stamp(12);
    await s3.put(key, `${JSON.stringify(edited, null, 4)}\n`);

    // `state show` says what the next run will do with it, and writes nothing.
    const shown = await cli(['state', 'show', '--json', '--config', first.config], { env: s3.env });
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stderr).toContain(`the next run adopts the hand edit of s3://${s3.bucket}/${key}: shop_orders to ${stamp(12)}`);
    expect(JSON.parse(shown.stdout).streams.shop_orders.watermark.cursor.value).toBe(stamp(12));

    // Upstream corrected every amount; the tap re-sends ids 12..30 (updated_at >= the edited bookmark), which merge.
    const backfill = await run({ count: 30, state_every: 4, bump: 7 }, { document });
    expect(backfill.code, backfill.stderr).toBe(0);
    expect(backfill.stream).toMatchObject({ rows_loaded: 19 });
    const loaded = rows();
    expect(loaded.map((r) => r.id)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(loaded.find((r) => r.id === 11)!.amount).toBe(110);
    expect(loaded.find((r) => r.id === 12)!.amount).toBe(127);
    expect(loaded.find((r) => r.id === 30)!.amount).toBe(307);

    const versions = await history(backfill.config);
    const adoption = versions.find((v) => v.reason.startsWith('hand edit of'));
    expect(adoption, JSON.stringify(versions.map((v) => v.reason))).toBeDefined();
    expect(adoption!.reason).toContain(`s3://${s3.bucket}/${key}`);
    expect(adoption!.reason).toContain(`shop_orders to ${stamp(12)}`);
    expect(adoption!.run_id).toBeNull();
    // The run that followed wrote the document again from its own commits.
    expect((await getJson(key)).bookmarks.orders.replication_key_value).toBe(stamp(30));
    // Adopted once: the next run reads nothing again.
    const after = await run({ count: 30, state_every: 4, bump: 7 }, { document });
    expect(after.code, after.stderr).toBe(0);
    expect(after.stream).toMatchObject({ rows_loaded: 0 });
    expect((await history(after.config)).filter((v) => v.reason.startsWith('hand edit of'))).toHaveLength(1);
  }, 120_000);

  it.each([
    ['a value that is not a timestamp', (doc: any): void => void (doc.bookmarks.orders.replication_key_value = 'yesterday'), 'merge', /--cursor for updated_at/],
    ['a bookmark of a stream the pipeline does not have', (doc: any): void => void (doc.bookmarks.invoices = { replication_key: 'updated_at', replication_key_value: stamp(3) }), 'merge', /"invoices" names no stream/],
    ['moving an append stream back', (doc: any): void => void (doc.bookmarks.orders.replication_key_value = stamp(5)), 'append', /appends its rows/],
    ['a removed bookmark', (doc: any): void => void delete doc.bookmarks.orders, 'merge', /was removed; to read the stream from its start use tidemark state reset shop_orders/],
  ] as const)('an invalid edit (%s) is refused, naming the key and the stream, and nothing is loaded', async (_what, edit, write, reason) => {
    const document = '{key: "state/singer.json"}';
    const key = `${prefix}/state/singer.json`;
    const first = await run({ count: 20, state_every: 3 }, { document, write });
    expect(first.code, first.stderr).toBe(0);
    const doc = await getJson(key);
    edit(doc);
    const text = `${JSON.stringify(doc, null, 2)}\n`;
    await s3.put(key, text);

    const config = await writeYaml(dir, 'p.yaml', pipelineYaml({ count: 25, state_every: 3 }, { document, write }));
    const shown = await cli(['state', 'show', '--config', config], { env: s3.env });
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stderr).toContain('the next run stops:');
    const refused = await run({ count: 25, state_every: 3 }, { document, write });
    expect(refused.code).toBe(1);
    const message = refused.stderr + refused.stdout;
    expect(message).toContain(`s3://${s3.bucket}/${key}`);
    expect(message).toContain(write === 'merge' && /invoices/.test(text) ? 'invoices' : 'shop_orders');
    expect(message).toMatch(reason);
    expect(message).not.toContain('S3RVER');
    // Nothing moved, and the edit stays for the user to fix: refused again, never silently written over.
    expect(rows()).toHaveLength(20);
    expect(await getText(key)).toBe(text);
    expect((await run({ count: 25, state_every: 3 }, { document, write })).code).toBe(1);
    expect(await getText(key)).toBe(text);
    // Undoing the edit lets the pipeline go on.
    const restored = { bookmarks: { orders: { replication_key: 'updated_at', replication_key_value: stamp(20) } } };
    await s3.put(key, JSON.stringify(restored));
    const resumed = await run({ count: 25, state_every: 3 }, { document, write });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(rows().map((r) => r.id)).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
  }, 120_000);
});

describe('state list / delete --store s3://… with --endpoint and --region', () => {
  it('reads the bucket with the endpoint from the flag or from AWS_ENDPOINT_URL, credentials from the AWS variables', async () => {
    const first = await run({ count: 8, state_every: 3 }, { document: '{layout: dataspoc}' });
    expect(first.code, first.stderr).toBe(0);
    const store = `s3://${s3.bucket}/${prefix}`;
    const aws = { AWS_ACCESS_KEY_ID: s3.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.secretAccessKey, AWS_EC2_METADATA_DISABLED: 'true' };

    const listed = await cli(['state', 'list', '--store', store, '--endpoint', s3.endpoint, '--region', 'eu-west-1', '--json'], { env: aws });
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toMatchObject([{ pipeline: 'shop-orders', streams: ['shop_orders'] }]);

    const fromEnv = await cli(['state', 'list', '--store', store], { env: { ...aws, AWS_ENDPOINT_URL: s3.endpoint, AWS_REGION: 'eu-west-1' } });
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
    expect(fromEnv.stdout).toContain(`${store}`);
    expect(fromEnv.stdout).toMatch(/shop-orders\s+version \d+\s+streams: shop_orders/);

    // No credentials anywhere: the error names the bucket and what to set, never a secret.
    const bare = await cli(['state', 'list', '--store', store, '--endpoint', s3.endpoint], {
      env: { AWS_ACCESS_KEY_ID: '', AWS_SECRET_ACCESS_KEY: '', AWS_EC2_METADATA_DISABLED: 'true', AWS_PROFILE: 'tidemark-none', AWS_CONFIG_FILE: join(dir, 'none'), AWS_SHARED_CREDENTIALS_FILE: join(dir, 'none') },
    });
    expect(bare.code).toBe(1);
    expect(bare.stderr).toContain(`s3://${s3.bucket}/${prefix}`);
    expect(bare.stderr).toContain('AWS_ACCESS_KEY_ID');
    expect(bare.stderr).not.toContain('S3RVER');

    // s3rver ignores conditional writes: the pipeline's own lock (a file) is taken, as its YAML says.
    const deleted = await cli(['state', 'delete', 'shop-orders', '--store', store, '--endpoint', s3.endpoint, '--config', first.config, '--yes', '--json'], { env: { ...aws, ...s3.env } });
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(JSON.parse(deleted.stdout)).toMatchObject({ pipeline: 'shop-orders' });
    const empty = await cli(['state', 'list', '--store', store, '--endpoint', s3.endpoint], { env: aws });
    expect(empty.stdout).toContain('holds no pipeline state');
    // The pipeline's Singer document went with its state.
    expect(await getText(`${prefix}/.dataspoc/state/shop-orders/state.json`)).toBeUndefined();
  }, 120_000);
});
