/**
 * The lake at the Destination seam: delete+insert by partition, Hive-style partition_by, path traversal refused,
 * conditional-write probing per bucket, bucket locking refused on a server that ignores conditional writes, and a
 * damaged bucket state store detected (never "no state") and repaired by reconciliation.
 */
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, afterEach, describe, expect, it } from 'vitest';
import type { CommitRequest, LoadInfo } from '../../../src/core/connector.js';
import { ConfigError, DestinationError } from '../../../src/core/errors.js';
import { silentLogger } from '../../../src/core/logger.js';
import type { Column, LedgerEntry, PipelineState, Row, StreamSchema } from '../../../src/core/types.js';
import { FilesDestination } from '../../../src/destinations/files/files-destination.js';
import { reconcile } from '../../../src/engine/state-sync.js';
import { createStateStore } from '../../../src/registry/index.js';
import { openObjectStore } from '../../../src/shared/object-store.js';
import { ObjectStoreLeaseProvider, probeConditionalWrites } from '../../../src/shared/object-store-lease.js';
import { CorruptStateError } from '../../../src/state/state-store.js';
import { tempDir } from '../../helpers/fs.js';
import { startS3, type LocalS3 } from '../../helpers/s3.js';

let s3: LocalS3;
beforeAll(async () => {
  s3 = await startS3();
}, 30_000);
afterAll(async () => s3?.stop());

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(() => cleanup());

const columns: Column[] = [
  { name: 'id', type: { kind: 'int64' }, nullable: false },
  { name: 'month', type: { kind: 'text' }, nullable: false },
  { name: 'value', type: { kind: 'text' }, nullable: true },
];
const schema: StreamSchema = { name: 'trips', columns, primaryKey: [] };
const creds = () => ({ accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey });

function request(version: number, ledger?: LedgerEntry[]): CommitRequest {
  const now = new Date().toISOString();
  return {
    state: { pipeline: 'lake', version, streams: {} },
    run: { runId: `r${version}`, pipeline: 'lake', stream: 'trips', startedAt: now, finishedAt: now, outcome: 'committed', rowsRead: 0, rowsLoaded: 0, rowsRejected: 0, commits: 1, cursorMin: null, cursorMax: null, full: false, worker: 't', error: null },
    rejects: [],
    swap: false,
    ...(ledger ? { ledger } : {}),
  };
}

function load(target: Partial<LoadInfo['target']> = {}, version = 1): LoadInfo {
  return { pipeline: 'lake', runId: `r${version}`, target: { schema, write: 'append', ...target }, fence: { pipeline: 'lake', token: 1 } };
}

function entry(partition: string, rows: number): LedgerEntry {
  return { pipeline: 'lake', stream: 'trips', partition, files: [], rows, bytes: 1, status: 'loaded', runId: 'r', loadedAt: new Date().toISOString() };
}

describe('delete+insert by partition', () => {
  it('a reload replaces exactly the partition\'s objects in one commit; the ledger and counts follow', async () => {
    const dest = await FilesDestination.open({ location: join(dir, 'lake'), logger: silentLogger });
    try {
      const rows = (month: string, ids: number[], tag: string): Row[] => ids.map((id) => [BigInt(id), month, `${tag}${id}`]);
      let version = 0;
      const put = async (month: string, data: Row[]) => {
        version += 1;
        const txn = await dest.begin(load({ replacePartition: { column: 'month', value: month } }, version));
        await txn.write(data);
        await txn.commit(request(version, [entry(month, data.length)]));
      };
      await put('2024-01', rows('2024-01', [1, 2, 3], 'a'));
      await put('2024-02', rows('2024-02', [4, 5], 'b'));
      await put('2024-01', rows('2024-01', [1, 6], 'c'));
      const got = await dest.query(`SELECT CAST(id AS VARCHAR) AS id, month, value FROM trips ORDER BY id`);
      expect(got.map((r) => `${r.id}:${r.month}:${r.value}`)).toEqual(['1:2024-01:c1', '4:2024-02:b4', '5:2024-02:b5', '6:2024-01:c6']);
      expect(Object.fromEntries(await dest.ledger.countRows('trips', 'month'))).toEqual({ '2024-01': 2, '2024-02': 2 });
      expect((await dest.ledger.list('lake')).map((e) => [e.partition, e.rows])).toEqual([['2024-01', 2], ['2024-02', 2]]);
      expect(await readdir(join(dir, 'lake', 'trips'))).toEqual(['month=2024-01', 'month=2024-02']);
      expect(await dest.ledger.forget('lake', 'trips', ['2024-02'])).toBe(1);
      expect((await dest.ledger.list('lake')).map((e) => e.partition)).toEqual(['2024-01']);
      // The forget was its own commit; the state did not move.
      expect((await dest.state.load('lake'))?.version).toBe(3);
    } finally {
      await dest.close();
    }
  });

  it('partition_by splits each load into Hive-style directories, encoding any value into one safe segment', async () => {
    const dest = await FilesDestination.open({ location: join(dir, 'lake'), partitionBy: 'month', logger: silentLogger });
    try {
      const txn = await dest.begin(load());
      await txn.write([[1n, '2024-01', 'a'], [2n, '../../etc', 'b'], [3n, '2024-01', 'c']]);
      await txn.commit(request(1));
      expect((await readdir(join(dir, 'lake', 'trips'))).sort()).toEqual(['month=%2E%2E%2F%2E%2E%2Fetc', 'month=2024-01']);
      const got = await dest.query(`SELECT CAST(id AS VARCHAR) AS id, month FROM trips ORDER BY id`);
      expect(got.map((r) => `${r.id}:${r.month}`)).toEqual(['1:2024-01', '2:../../etc', '3:2024-01']);
    } finally {
      await dest.close();
    }
  });
});

describe('names that would leave the lake', () => {
  it.each(['../x', '/etc', 'a/b', 'nul\u0000', '..'])('a partition %j is refused before anything is written', async (value) => {
    const dest = await FilesDestination.open({ location: join(dir, 'lake'), logger: silentLogger });
    try {
      await expect(dest.begin(load({ replacePartition: { column: 'month', value } }))).rejects.toBeInstanceOf(DestinationError);
    } finally {
      await dest.close();
    }
  });

  it.each(['../x', '/abs', 'a/b', 'nul\u0000'])('a pipeline or stream name %j is refused', async (name) => {
    const dest = await FilesDestination.open({ location: join(dir, 'lake'), logger: silentLogger });
    try {
      await expect(dest.begin({ ...load(), pipeline: name })).rejects.toBeInstanceOf(DestinationError);
      await expect(dest.begin(load({ schema: { ...schema, name } }))).rejects.toBeInstanceOf(DestinationError);
      await expect(dest.state.load(name)).rejects.toBeInstanceOf(DestinationError);
    } finally {
      await dest.close();
    }
  });

  it('merge is refused by the destination too (library users skip config validation)', async () => {
    const dest = await FilesDestination.open({ location: join(dir, 'lake'), logger: silentLogger });
    try {
      await expect(dest.begin(load({ write: 'merge' }))).rejects.toThrow(/cannot merge.*write: append.*strategy: full.*strategy: partitioned/);
    } finally {
      await dest.close();
    }
  });
});

describe('conditional writes', () => {
  it('are probed per location: honoured on a directory, ignored by s3rver', async () => {
    expect(await probeConditionalWrites(await openObjectStore(join(dir, 'x')))).toBe(true);
    const bucket = await openObjectStore(`s3://${s3.bucket}/probe`, { endpoint: s3.endpoint, credentials: creds() });
    expect(await probeConditionalWrites(bucket)).toBe(false);
    await bucket.close();
  });

  it('bucket locking is refused on s3rver with a message naming lock: and the other stores', async () => {
    const bucket = await openObjectStore(`s3://${s3.bucket}/locks`, { endpoint: s3.endpoint, credentials: creds() });
    const leases = new ObjectStoreLeaseProvider(bucket, '_tidemark/locks');
    const refused = leases.acquire('p', { ttlMs: 10_000 });
    await expect(refused).rejects.toBeInstanceOf(ConfigError);
    await expect(refused).rejects.toThrow(/ignores conditional writes.*lock: \{type: file.*sqlite \/ postgres/);
    await bucket.close();
  });

  it('the bucket state store refuses its own lease on s3rver, and uses lock: when given', async () => {
    const location = `s3://${s3.bucket}/refuse-store`;
    const bucket = { type: 'bucket' as const, location, endpoint: s3.endpoint, credentials: { access_key_id: s3.accessKeyId, secret_access_key: s3.secretAccessKey } };
    const bare = await createStateStore(bucket);
    await expect(bare.acquire('p', { ttlMs: 10_000 })).rejects.toThrow(/ignores conditional writes/);
    await bare.close();
    const locked = await createStateStore({ ...bucket, lock: { type: 'file', path: join(dir, 'locks') } });
    const lease = await locked.acquire('p', { ttlMs: 10_000 });
    await expect(locked.acquire('p', { ttlMs: 10_000 })).rejects.toThrow(/already running/);
    await lease.release();
    await locked.close();
  });
});

describe('a damaged bucket state store', () => {
  const state = (version: number): PipelineState => ({ pipeline: 'p', version, streams: { s: { strategy: 'full', generation: version } } });

  it.each(['', '{"format": "tidemark-state", "vers', '[]'])('%j is corrupt, never "no state", and reconciliation repairs it from the destination', async (damage) => {
    const store = await createStateStore({ type: 'bucket', location: join(dir, 'bucket') });
    const dest = await FilesDestination.open({ location: join(dir, 'lake'), logger: silentLogger });
    try {
      await store.save(state(1), undefined, { runId: null, reason: 'run' });
      await dest.state.save(state(2), undefined, { runId: null, reason: 'run' });
      await writeFile(join(dir, 'bucket', '_tidemark', 'store', 'p', 'state.json'), damage);
      await expect(store.load('p')).rejects.toBeInstanceOf(CorruptStateError);
      const result = await reconcile('p', store, dest.state, silentLogger);
      expect(result.action).toBe('repaired-store');
      expect(await store.load('p')).toEqual(state(2));
    } finally {
      await store.close();
      await dest.close();
    }
  });

  it('a state object deleted while its history remains is corrupt too', async () => {
    const store = await createStateStore({ type: 'bucket', location: `s3://${s3.bucket}/vanished`, endpoint: s3.endpoint, credentials: { access_key_id: s3.accessKeyId, secret_access_key: s3.secretAccessKey }, lock: { type: 'file', path: join(dir, 'l') } });
    try {
      await store.save(state(1), undefined, { runId: null, reason: 'run' });
      await s3.remove('vanished/_tidemark/store/p/state.json');
      await expect(store.load('p')).rejects.toBeInstanceOf(CorruptStateError);
    } finally {
      await store.close();
    }
  });
});
