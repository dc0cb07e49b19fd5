import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConflictError } from '../../src/core/errors.js';
import { FileLeaseProvider } from '../../src/state/file/file-lease.js';
import { tempDir } from '../helpers/fs.js';

describe('file lease', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  beforeEach(async () => ({ dir, cleanup } = await tempDir()));
  afterEach(() => cleanup());

  it('is exclusive, and a taken-over holder learns it before committing', async () => {
    const leases = new FileLeaseProvider(dir);
    const first = await leases.acquire('p', { ttlMs: 200 });
    await expect(leases.acquire('p', { ttlMs: 200 })).rejects.toThrow(/pipeline p is already running \(since .*pid/);
    await first.assertHeld();
    // Simulate a frozen holder: stop its renewals by waiting out the lease from a process that does not renew.
    (first as unknown as { lost: string | undefined }).lost = undefined;
    await first.release();
    const second = await leases.acquire('p', { ttlMs: 60_000 });
    expect(second.token).toBe(first.token + 1);
    await expect(first.assertHeld()).rejects.toBeInstanceOf(ConflictError);
    await second.release();
    const third = await leases.acquire('p', { ttlMs: 60_000 });
    expect(third.token).toBe(second.token + 1);
    await third.release();
  });

  it('keeps separate pipelines apart', async () => {
    const leases = new FileLeaseProvider(dir);
    const a = await leases.acquire('a', { ttlMs: 60_000 });
    const b = await leases.acquire('b', { ttlMs: 60_000 });
    expect(a.token).toBe(1);
    expect(b.token).toBe(1);
    await a.release();
    await b.release();
  });
});
