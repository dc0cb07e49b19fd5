/**
 * The lake's commit protocol over an object store (see lake-layout.ts for the layout):
 *
 * 1. data objects are uploaded under unique names (`part-<load_id>-<n>`), never overwriting anything;
 * 2. a new manifest (a snapshot naming every live object, the state, the ledger and recent runs) is uploaded under
 *    a unique name;
 * 3. `state.json`, naming that manifest, is written last with a compare-and-set: `If-Match` on the ETag read at the
 *    start of the commit (`If-None-Match: *` for the first commit). That write is the commit point.
 *
 * A crash before step 3 leaves objects no committed manifest names; the next run deletes them (`collect`). Readers
 * and tidemark itself trust only objects named by the manifest `state.json` points to.
 */
import { open } from 'node:fs/promises';
import { dirname } from 'node:path';
import { ConflictError, LeaseLostError, DestinationError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { ObjectStore } from '../../shared/object-store.js';
import { probeConditionalWrites } from '../../shared/object-store-lease.js';
import { CorruptStateError } from '../../state/state-store.js';
import {
  MANIFESTS_KEPT,
  bookmarksOf,
  emptyManifest,
  keys,
  manifestCommit,
  parseManifest,
  type LakeManifest,
  type LakeStateDocument,
} from './lake-layout.js';

/** The committed head of a pipeline: its state document (with the ETag to compare against) and manifest. */
export interface LakeHead {
  readonly manifest: LakeManifest;
  /** ETag of `state.json` as read; undefined when there is none yet. */
  readonly etag: string | undefined;
  readonly exists: boolean;
}

/** What one commit changes; everything else is carried over from the committed manifest. */
export type ManifestChange = Partial<Pick<LakeManifest, 'state' | 'fence' | 'tables' | 'builds' | 'ledger' | 'failures' | 'checksums' | 'runs' | 'rejects'>> & {
  readonly stateChanged: boolean;
};

export interface CommitOptions {
  readonly loadId: string;
  readonly runId: string | null;
  readonly reason: string;
  /** Checks the head (fencing token, state version) before anything is written; throws to refuse. */
  readonly check?: (head: LakeHead) => void;
  /** Runs after the manifest is uploaded and right before the commit point (failpoints, the lease re-check). */
  readonly beforeCommitPoint?: () => Promise<void>;
}

export class Lake {
  private conditional: Promise<boolean> | undefined;

  constructor(
    readonly store: ObjectStore,
    private readonly logger: Logger,
  ) {}

  private async honoursConditionalWrites(): Promise<boolean> {
    if (this.store.localPath('x') !== undefined) return true;
    this.conditional ??= probeConditionalWrites(this.store);
    return this.conditional;
  }

  /**
   * The committed head. A torn, empty or damaged `state.json` (or one that vanished while manifests remain) is
   * never "no state": it is repaired from the newest manifest whose data objects all exist. That manifest is
   * self-consistent (it names only complete objects and the state that describes them), so adopting it can neither
   * lose nor duplicate rows.
   */
  async head(pipeline: string): Promise<LakeHead> {
    const key = keys.state(pipeline);
    const got = await this.store.get(key);
    if (got === undefined) {
      const newest = await this.newestManifestKey(pipeline);
      if (newest === undefined) return { manifest: emptyManifest(pipeline), etag: undefined, exists: false };
      return this.repair(pipeline, `the state object ${this.store.describe(key)} is missing but manifests exist`, undefined);
    }
    let doc: LakeStateDocument;
    try {
      const text = Buffer.from(got.body).toString('utf8');
      if (text.trim() === '') throw new Error('it is empty (torn write?)');
      doc = JSON.parse(text) as LakeStateDocument;
      if (doc?.tidemark?.format !== 'tidemark-lake-state' || typeof doc.tidemark.manifest !== 'string' || typeof doc.tidemark.commit !== 'number') {
        throw new Error('it is not a tidemark lake state document');
      }
    } catch (error) {
      return this.repair(pipeline, `the state object ${this.store.describe(key)} is unreadable: ${(error as Error).message}`, got.info.etag);
    }
    const manifest = await this.readManifest(doc.tidemark.manifest);
    if (manifest === undefined || manifest.commit !== doc.tidemark.commit) {
      return this.repair(pipeline, `the state object ${this.store.describe(key)} names manifest ${doc.tidemark.manifest}, which is missing or does not match`, got.info.etag);
    }
    return { manifest, etag: got.info.etag, exists: true };
  }

  async readManifest(key: string): Promise<LakeManifest | undefined> {
    const got = await this.store.get(key);
    if (got === undefined) return undefined;
    return parseManifest(Buffer.from(got.body).toString('utf8'), this.store.describe(key));
  }

  private async manifestKeys(pipeline: string): Promise<{ key: string; commit: number }[]> {
    const out: { key: string; commit: number }[] = [];
    for await (const info of this.store.list(keys.manifests(pipeline))) {
      const commit = manifestCommit(pipeline, info.key);
      if (commit !== undefined) out.push({ key: info.key, commit });
    }
    return out.sort((a, b) => b.commit - a.commit || (a.key < b.key ? 1 : -1));
  }

  private async newestManifestKey(pipeline: string): Promise<string | undefined> {
    return (await this.manifestKeys(pipeline))[0]?.key;
  }

  private async repair(pipeline: string, problem: string, corruptEtag: string | undefined): Promise<LakeHead> {
    for (const { key } of await this.manifestKeys(pipeline)) {
      let manifest: LakeManifest | undefined;
      try {
        manifest = await this.readManifest(key);
      } catch {
        continue;
      }
      if (manifest === undefined || !(await this.complete(manifest))) continue;
      const info = await this.writeState(manifest, corruptEtag, corruptEtag === undefined ? 'create' : 'replace').catch((error: unknown) => {
        if (error instanceof ConflictError) return undefined; // another process repaired it first; read that
        throw error;
      });
      if (info === undefined) return this.head(pipeline);
      this.logger.log('warn', `pipeline ${pipeline}: ${problem}; repaired it from manifest ${this.store.describe(key)} (commit ${manifest.commit}, state version ${manifest.state?.version ?? 'none'})`);
      return { manifest, etag: info, exists: true };
    }
    throw new CorruptStateError(`pipeline ${pipeline}: ${problem}, and no complete manifest is left to repair it from (restore state.json from a backup, or start over with tidemark state reset)`, {
      context: { pipeline, phase: 'state' },
    });
  }

  /** Whether every data object a manifest names exists (the manifest was written after them, unless damaged). */
  private async complete(manifest: LakeManifest): Promise<boolean> {
    for (const table of [...Object.values(manifest.tables), ...Object.values(manifest.builds)]) {
      for (const file of table.files) if ((await this.store.head(file.key)) === undefined) return false;
    }
    return true;
  }

  /** Writes `state.json` naming `manifest`; returns the new ETag. */
  private async writeState(manifest: LakeManifest, etag: string | undefined, mode: 'create' | 'replace'): Promise<string | undefined> {
    const key = keys.state(manifest.pipeline);
    const doc: LakeStateDocument = {
      bookmarks: bookmarksOf(manifest.state),
      currently_syncing: null,
      tidemark: {
        format: 'tidemark-lake-state',
        pipeline: manifest.pipeline,
        version: manifest.state?.version ?? 0,
        commit: manifest.commit,
        manifest: manifest.key,
        fence: manifest.fence,
        savedAt: manifest.committedAt,
        runId: manifest.runId,
        state: manifest.state,
      },
    };
    const body = `${JSON.stringify(doc, null, 2)}\n`;
    let info;
    if (await this.honoursConditionalWrites()) {
      info = await this.store.put(key, body, mode === 'create' ? { ifNoneMatch: '*' } : { ifMatch: etag ?? '' }).catch((error: unknown) => {
        if (error instanceof ConflictError) {
          throw new ConflictError(`the state of pipeline ${manifest.pipeline} in ${this.store.describe(key)} moved underneath this commit`, { context: { pipeline: manifest.pipeline, phase: 'commit' }, cause: error });
        }
        throw error;
      });
    } else {
      // The server would ignore a condition; the lock (kept elsewhere, see object-store-lease.ts) serialises
      // writers, and this last look narrows what a misconfigured second writer could do.
      const now = await this.store.head(key);
      if ((mode === 'create' && now !== undefined) || (mode === 'replace' && now?.etag !== etag)) {
        throw new ConflictError(`the state of pipeline ${manifest.pipeline} in ${this.store.describe(key)} moved underneath this commit`, { context: { pipeline: manifest.pipeline, phase: 'commit' } });
      }
      info = await this.store.put(key, body);
    }
    await this.sync(key);
    return info.etag;
  }

  /**
   * One commit: uploads the next manifest, then writes `state.json` (the commit point). Returns the committed
   * manifest. On a refused commit point the manifest just uploaded is removed again.
   */
  async commit(pipeline: string, change: ManifestChange | ((head: LakeHead) => ManifestChange), options: CommitOptions): Promise<LakeManifest> {
    const head = await this.head(pipeline);
    options.check?.(head);
    const prior = head.manifest;
    const changed = typeof change === 'function' ? change(head) : change;
    const commit = prior.commit + 1;
    const key = keys.manifest(pipeline, commit, options.loadId);
    const next: LakeManifest = {
      ...prior,
      ...changed,
      commit,
      key,
      previous: prior.key === '' ? null : prior.key,
      committedAt: new Date().toISOString(),
      runId: options.runId,
      reason: options.reason,
    };
    await this.store.put(key, JSON.stringify(next), { ifNoneMatch: '*', contentType: 'application/json' });
    await this.sync(key);
    try {
      await options.beforeCommitPoint?.();
      await this.writeState(next, head.etag, head.exists ? 'replace' : 'create');
    } catch (error) {
      await this.store.delete(key).catch(() => undefined);
      throw error;
    }
    return next;
  }

  /** Makes a locally written object and its directory entry durable before anything names it. */
  async sync(key: string): Promise<void> {
    const path = this.store.localPath(key);
    if (path === undefined) return;
    for (const target of [path, dirname(path)]) {
      const handle = await open(target, 'r').catch(() => undefined);
      if (!handle) continue;
      try {
        await handle.sync().catch(() => undefined);
      } finally {
        await handle.close();
      }
    }
  }

  /** Removes what no committed manifest names under `prefix` (objects matching `owned`), keeping `keep`. */
  async sweep(prefix: string, keep: ReadonlySet<string>, owned: (key: string) => boolean): Promise<number> {
    let removed = 0;
    for await (const info of this.store.list(prefix)) {
      if (keep.has(info.key) || !owned(info.key)) continue;
      await this.store.delete(info.key);
      removed += 1;
    }
    return removed;
  }

  /** Manifests of runs that never committed, and committed ones beyond the history kept. */
  async collectManifests(pipeline: string, head: LakeHead, kept: number = MANIFESTS_KEPT): Promise<number> {
    let removed = 0;
    for (const { key, commit } of await this.manifestKeys(pipeline)) {
      const orphan = commit > head.manifest.commit || (commit === head.manifest.commit && key !== head.manifest.key);
      if (orphan || commit <= head.manifest.commit - Math.max(1, kept)) {
        await this.store.delete(key);
        removed += 1;
      }
    }
    return removed;
  }

  /** The committed states, newest first, following each manifest's `previous`. */
  async chain(pipeline: string, limit = MANIFESTS_KEPT): Promise<LakeManifest[]> {
    const head = await this.head(pipeline);
    if (!head.exists) return [];
    const out: LakeManifest[] = [head.manifest];
    let previous = head.manifest.previous;
    while (previous !== null && out.length < limit) {
      const manifest = await this.readManifest(previous).catch(() => undefined);
      if (manifest === undefined) break;
      out.push(manifest);
      previous = manifest.previous;
    }
    return out;
  }

  /** Pipelines that have a state object here. */
  async pipelines(): Promise<string[]> {
    const out = new Set<string>();
    for await (const info of this.store.list('_tidemark/state/')) {
      const m = /^_tidemark\/state\/([^/]+)\/state\.json$/.exec(info.key);
      if (m) out.add(m[1]!);
    }
    return [...out].sort();
  }
}

export function refuse(message: string, pipeline: string): never {
  throw new ConflictError(message, { context: { pipeline, phase: 'commit' } });
}

/** A commit fenced off: a newer lease holder exists, so this run lost its own. */
export function refuseLostLease(message: string, pipeline: string): never {
  throw new LeaseLostError(message, { context: { pipeline, phase: 'commit' } });
}

export function lakeError(message: string, pipeline: string, stream: string | undefined, cause?: unknown): DestinationError {
  return new DestinationError(message, { context: { pipeline, ...(stream !== undefined ? { stream } : {}), phase: 'commit' }, ...(cause !== undefined ? { cause } : {}) });
}
