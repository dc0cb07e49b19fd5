/**
 * State in a directory: `<pipeline>.state.json` is the current document, `<pipeline>.history/<version>.json` keeps
 * every version. A save writes a temp file, fsyncs it, claims the version by hard-linking it into history (exactly
 * one writer can), then renames it over the current file and fsyncs the directory, so a crash leaves either the old
 * or the new document, never a torn one. A torn, empty or missing-but-once-written file is reported as corrupt.
 */
import { link, mkdir, open, readdir, readFile, rename, rm, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Lease, SaveMeta, LeaseOptions, LeaseHolder } from '../../core/connector.js';
import { ConflictError } from '../../core/errors.js';
import { randomHex } from '../../core/ids.js';
import type { PipelineState, PipelineStateVersion } from '../../core/types.js';
import { CorruptStateError, StateOnlyStore, parseStoredDocument, type ExternalStateStore, type StoredDocument } from '../state-store.js';
import { FileLeaseProvider } from './file-lease.js';

export interface FileStateStoreOptions {
  /** A directory; created when missing. */
  readonly path: string;
}

const HISTORY_RE = /^(\d{12})\.json$/;
/** History beyond this many versions is pruned, oldest first. */
const KEEP_VERSIONS = 1000;

export class FileStateStore extends StateOnlyStore implements ExternalStateStore {
  readonly description: string;
  private readonly leases: FileLeaseProvider;

  constructor(private readonly options: FileStateStoreOptions) {
    super();
    this.description = `state directory ${options.path}`;
    this.leases = new FileLeaseProvider(join(options.path, '.locks'));
  }

  private current(pipeline: string): string {
    return join(this.options.path, `${pipeline}.state.json`);
  }

  private historyDir(pipeline: string): string {
    return join(this.options.path, `${pipeline}.history`);
  }

  async load(pipeline: string): Promise<PipelineState | undefined> {
    let text: string;
    try {
      text = await readFile(this.current(pipeline), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      // A vanished current file with history left behind is damage, not a fresh start.
      if ((await this.versions(pipeline)).length > 0) {
        throw new CorruptStateError(`state file of pipeline ${pipeline} is missing from ${this.options.path} but its history exists`, {
          context: { pipeline },
        });
      }
      return undefined;
    }
    if (text.trim() === '') throw new CorruptStateError(`state file ${this.current(pipeline)} is empty (torn write?)`, { context: { pipeline } });
    return this.parseDocument(text, pipeline, this.current(pipeline)).state;
  }

  private parseDocument(text: string, pipeline: string, where: string): StoredDocument {
    return parseStoredDocument(text, pipeline, `state file ${where}`);
  }


  async save(next: PipelineState, expectedVersion: number | undefined, meta: SaveMeta): Promise<void> {
    const stored = await this.load(next.pipeline);
    if (stored?.version !== expectedVersion) {
      throw new ConflictError(
        `state of pipeline ${next.pipeline} in ${this.options.path} moved (expected version ${expectedVersion ?? 'none'}, found ${stored?.version ?? 'none'})`,
        { context: { pipeline: next.pipeline, phase: 'state' } },
      );
    }
    await this.write(next, meta, false);
  }

  async repair(next: PipelineState, meta: SaveMeta): Promise<void> {
    await this.write(next, meta, true);
  }

  private async write(next: PipelineState, meta: SaveMeta, overwrite: boolean): Promise<void> {
    const dir = this.historyDir(next.pipeline);
    await mkdir(dir, { recursive: true });
    const doc: StoredDocument = {
      format: 'tidemark-state',
      version: next.version,
      savedAt: new Date().toISOString(),
      runId: meta.runId,
      reason: meta.reason,
      state: next,
    };
    const tmp = join(this.options.path, `.${next.pipeline}.${randomHex(6)}.tmp`);
    await writeDurably(tmp, `${JSON.stringify(doc, null, 2)}\n`);
    const versionFile = join(dir, `${String(next.version).padStart(12, '0')}.json`);
    try {
      try {
        await link(tmp, versionFile);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
        if (!overwrite) {
          throw new ConflictError(`state version ${next.version} of pipeline ${next.pipeline} was just saved by another writer`, {
            context: { pipeline: next.pipeline, phase: 'state' },
          });
        }
        const copy = `${tmp}.h`;
        await link(tmp, copy);
        await rename(copy, versionFile);
      }
      await rename(tmp, this.current(next.pipeline));
      await syncDirectory(this.options.path);
      await syncDirectory(dir);
    } finally {
      await unlink(tmp).catch(() => undefined);
    }
    await this.prune(next.pipeline);
  }

  private async versions(pipeline: string): Promise<number[]> {
    try {
      return (await readdir(this.historyDir(pipeline)))
        .map((f) => HISTORY_RE.exec(f))
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => Number(m[1]))
        .sort((a, b) => b - a);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw error;
    }
  }

  private async prune(pipeline: string): Promise<void> {
    const versions = await this.versions(pipeline);
    for (const v of versions.slice(KEEP_VERSIONS)) {
      await unlink(join(this.historyDir(pipeline), `${String(v).padStart(12, '0')}.json`)).catch(() => undefined);
    }
  }

  async history(pipeline: string): Promise<readonly PipelineStateVersion[]> {
    const out: PipelineStateVersion[] = [];
    for (const v of await this.versions(pipeline)) {
      const file = join(this.historyDir(pipeline), `${String(v).padStart(12, '0')}.json`);
      try {
        const doc = this.parseDocument(await readFile(file, 'utf8'), pipeline, file);
        out.push({ version: doc.version, savedAt: doc.savedAt, runId: doc.runId, reason: doc.reason, state: doc.state });
      } catch (error) {
        // One damaged old version must not hide the others.
        if (!(error instanceof CorruptStateError)) throw error;
      }
    }
    return out;
  }

  async pipelines(): Promise<readonly PipelineState[]> {
    let names: string[];
    try {
      names = (await readdir(this.options.path)).filter((f) => f.endsWith('.state.json')).map((f) => f.slice(0, -'.state.json'.length));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw error;
    }
    const out: PipelineState[] = [];
    for (const name of names.sort()) {
      try {
        const state = await this.load(name);
        if (state !== undefined) out.push(state);
      } catch (error) {
        // A damaged document is reported by `state show` of that pipeline; the catalogue lists the others.
        if (!(error instanceof CorruptStateError)) throw error;
      }
    }
    return out;
  }

  async remove(pipeline: string): Promise<number> {
    const versions = (await this.versions(pipeline)).length;
    // History first: a crash midway leaves the current file, still a valid state (a current file gone with history
    // left would read as damage).
    await rm(this.historyDir(pipeline), { recursive: true, force: true });
    let current = 0;
    try {
      await unlink(this.current(pipeline));
      current = 1;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    await syncDirectory(this.options.path);
    return Math.max(versions, current);
  }

  acquire(pipeline: string, options: LeaseOptions): Promise<Lease> {
    return this.leases.acquire(pipeline, options);
  }

  holder(pipeline: string): Promise<LeaseHolder | undefined> {
    return this.leases.holder(pipeline);
  }

  async close(): Promise<void> {}
}

async function writeDurably(path: string, text: string): Promise<void> {
  const handle = await open(path, 'wx');
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** A rename is durable only once the directory entry is on disk. */
async function syncDirectory(path: string): Promise<void> {
  const handle = await open(path, 'r').catch(() => undefined);
  if (!handle) return;
  try {
    await handle.sync().catch(() => undefined);
  } finally {
    await handle.close();
  }
}
