/**
 * State in a bucket (or a local directory): `_tidemark/store/<pipeline>/state.json` is the current document and
 * `_tidemark/store/<pipeline>/history/<version>.json` keeps each version, so a run from any machine continues where
 * the last one stopped. A save is a compare-and-set on the document's ETag (`If-Match`, or `If-None-Match: *` for
 * the first); the history copy is written after it, so history never shows a version that did not become current.
 *
 * On a server that ignores conditional writes the compare-and-set degrades to compare-then-write, which is only
 * safe under a lease kept elsewhere; the lease provider of this store refuses to lock on such a server (see
 * shared/object-store-lease.ts), and `lock:` names the store that holds the lease instead.
 *
 * With `singer_document`, every save also writes the state as a Singer state document at a key of the user's choice
 * (DataSpoc's `.dataspoc/state/<pipeline>/state.json`), after the store's own document, which records the hash of
 * the bytes written there. Content at that key with another hash was put there by someone else (a hand edit): it is
 * never written over, and the engine reads it back (src/engine/singer-document-edits.ts).
 */
import { createHash } from 'node:crypto';
import type { Lease, LeaseProvider, SaveMeta, LeaseOptions, LeaseHolder } from '../../core/connector.js';
import { ConflictError, StateError } from '../../core/errors.js';
import type { PipelineState, PipelineStateVersion } from '../../core/types.js';
import type { ObjectStore } from '../../shared/object-store.js';
import { ObjectStoreLeaseProvider, probeConditionalWrites } from '../../shared/object-store-lease.js';
import {
  CorruptStateError,
  StateOnlyStore,
  parseStoredDocument,
  type DocumentCopy,
  type EditableDocument,
  type ExternalStateStore,
  type SingerDocumentMark,
  type StoredDocument,
} from '../state-store.js';

export interface BucketStateStoreOptions {
  readonly store: ObjectStore;
  /** The pipeline lock, when it is kept in another store (`lock:`); default: lease objects in this bucket. */
  readonly leases?: LeaseProvider;
  readonly singerDocument?: SingerDocumentOptions;
}

export interface SingerDocumentOptions {
  /** The key relative to the location; `{pipeline}` is replaced by the pipeline name. */
  readonly key: string;
  /**
   * The document a state renders to (it needs the pipeline's streams). Absent (a store opened without its pipeline,
   * as `state list --store` does): the document is left as it is.
   */
  readonly render?: (state: PipelineState) => unknown;
}

/** DataSpoc Pipe keeps each pipeline's Singer state here, relative to its bucket. */
export const DATASPOC_DOCUMENT_KEY = '.dataspoc/state/{pipeline}/state.json';

function sha256(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

const NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const HISTORY_RE = /\/history\/(\d{12})\.json$/;

function checkPipeline(pipeline: string): string {
  if (!NAME_RE.test(pipeline) || pipeline.includes('..')) {
    throw new StateError(`pipeline name ${JSON.stringify(pipeline)} cannot be used as a bucket path`, { context: { phase: 'state' } });
  }
  return pipeline;
}

export class BucketStateStore extends StateOnlyStore implements ExternalStateStore {
  readonly description: string;
  private readonly store: ObjectStore;
  private readonly leases: LeaseProvider;
  private conditional: Promise<boolean> | undefined;
  private readonly singer: SingerDocumentOptions | undefined;
  /** Per pipeline, the hash of a document the engine has read back: the next save may write over it. */
  private readonly settled = new Map<string, string>();
  readonly editableDocument?: EditableDocument;

  constructor(options: BucketStateStoreOptions) {
    super();
    this.store = options.store;
    this.singer = options.singerDocument;
    if (this.singer !== undefined) {
      this.editableDocument = {
        read: (pipeline) => this.readDocument(pipeline),
        settle: (pipeline, copy) => {
          if (copy.text !== undefined) this.settled.set(pipeline, sha256(copy.text));
        },
      };
    }
    this.description = `state bucket ${options.store.describe('')}`;
    this.leases = options.leases ?? new ObjectStoreLeaseProvider(options.store, '_tidemark/store-locks');
  }

  private current(pipeline: string): string {
    return `_tidemark/store/${checkPipeline(pipeline)}/state.json`;
  }

  private documentKey(pipeline: string): string {
    return this.singer!.key.replaceAll('{pipeline}', checkPipeline(pipeline));
  }

  /** True when `text` is what this store last wrote at the key (or wrote just before it), or was read back since. */
  private untouched(pipeline: string, text: string, mark: SingerDocumentMark | undefined): boolean {
    const hash = sha256(text);
    return this.settled.get(pipeline) === hash || (mark !== undefined && (mark.sha256 === hash || mark.previous === hash));
  }

  private async readDocument(pipeline: string): Promise<DocumentCopy> {
    const key = this.documentKey(pipeline);
    const where = this.store.describe(key);
    const got = await this.store.get(key);
    if (got === undefined) return { key, where, text: undefined, edited: false };
    const text = Buffer.from(got.body).toString('utf8');
    const mark = (await this.read(pipeline))?.doc.singerDocument;
    const own = mark?.key === key ? mark : undefined;
    return { key, where, text, edited: !this.untouched(pipeline, text, own), ...(own !== undefined ? { writtenFrom: own.version } : {}) };
  }

  private historyPrefix(pipeline: string): string {
    return `_tidemark/store/${checkPipeline(pipeline)}/history/`;
  }

  private historyKey(pipeline: string, version: number): string {
    return `${this.historyPrefix(pipeline)}${String(version).padStart(12, '0')}.json`;
  }

  private honoursConditionalWrites(): Promise<boolean> {
    if (this.store.localPath('x') !== undefined) return Promise.resolve(true);
    this.conditional ??= probeConditionalWrites(this.store);
    return this.conditional;
  }

  private async read(pipeline: string): Promise<{ doc: StoredDocument; etag: string | undefined } | undefined> {
    const key = this.current(pipeline);
    const got = await this.store.get(key);
    if (got === undefined) {
      for await (const _ of this.store.list(this.historyPrefix(pipeline))) {
        throw new CorruptStateError(`state of pipeline ${pipeline} is missing from ${this.store.describe(key)} but its history exists`, { context: { pipeline } });
      }
      return undefined;
    }
    const text = Buffer.from(got.body).toString('utf8');
    if (text.trim() === '') throw new CorruptStateError(`state object ${this.store.describe(key)} is empty (torn write?)`, { context: { pipeline } });
    return { doc: this.parse(text, pipeline, this.store.describe(key)), etag: got.info.etag };
  }

  private parse(text: string, pipeline: string, where: string): StoredDocument {
    return parseStoredDocument(text, pipeline, `state object ${where}`);
  }


  async load(pipeline: string): Promise<PipelineState | undefined> {
    return (await this.read(pipeline))?.doc.state;
  }

  async save(next: PipelineState, expectedVersion: number | undefined, meta: SaveMeta): Promise<void> {
    const pipeline = next.pipeline;
    const stored = await this.read(pipeline);
    if (stored?.doc.version !== expectedVersion) {
      throw new ConflictError(
        `state of pipeline ${pipeline} in ${this.store.describe('')} moved (expected version ${expectedVersion ?? 'none'}, found ${stored?.doc.version ?? 'none'})`,
        { context: { pipeline, phase: 'state' } },
      );
    }
    await this.write(next, meta, stored?.etag, stored !== undefined ? 'replace' : 'create', stored?.doc.singerDocument);
  }

  async repair(next: PipelineState, meta: SaveMeta): Promise<void> {
    // A damaged document keeps no trustworthy mark: the Singer document is then left for the engine to read back.
    const prior = await this.read(next.pipeline).catch(() => undefined);
    await this.write(next, meta, undefined, 'overwrite', prior?.doc.singerDocument);
  }

  /**
   * The Singer document to write with `next`, and the mark that says so; the prior mark alone when the document at
   * the key is not the store's own (a hand edit the engine has not read back yet), which is never written over.
   */
  private async singerWrite(next: PipelineState, prior: SingerDocumentMark | undefined): Promise<{ key?: string; body?: string; mark?: SingerDocumentMark }> {
    if (this.singer === undefined) return {};
    const key = this.documentKey(next.pipeline);
    const own = prior?.key === key ? prior : undefined;
    if (this.singer.render === undefined) return own !== undefined ? { mark: own } : {};
    const now = await this.store.get(key);
    if (now !== undefined && !this.untouched(next.pipeline, Buffer.from(now.body).toString('utf8'), own)) return own !== undefined ? { mark: own } : {};
    const body = `${JSON.stringify(this.singer.render(next), null, 2)}\n`;
    return { key, body, mark: { key, version: next.version, sha256: sha256(body), ...(own !== undefined ? { previous: own.sha256 } : {}) } };
  }

  private async write(next: PipelineState, meta: SaveMeta, etag: string | undefined, mode: 'create' | 'replace' | 'overwrite', prior: SingerDocumentMark | undefined): Promise<void> {
    const pipeline = next.pipeline;
    const key = this.current(pipeline);
    const singer = await this.singerWrite(next, prior);
    const doc: StoredDocument = {
      format: 'tidemark-state',
      version: next.version,
      savedAt: new Date().toISOString(),
      runId: meta.runId,
      reason: meta.reason,
      state: next,
      ...(singer.mark !== undefined ? { singerDocument: singer.mark } : {}),
    };
    const body = `${JSON.stringify(doc, null, 2)}\n`;
    const moved = (cause?: unknown) =>
      new ConflictError(`state version ${next.version} of pipeline ${pipeline} lost a race: ${this.store.describe(key)} changed meanwhile`, {
        context: { pipeline, phase: 'state' },
        ...(cause !== undefined ? { cause } : {}),
      });
    if (mode === 'overwrite') {
      await this.store.put(key, body, { contentType: 'application/json' });
    } else if (await this.honoursConditionalWrites()) {
      try {
        await this.store.put(key, body, mode === 'create' ? { ifNoneMatch: '*', contentType: 'application/json' } : { ifMatch: etag ?? '', contentType: 'application/json' });
      } catch (error) {
        if (error instanceof ConflictError) throw moved(error);
        throw error;
      }
    } else {
      const now = await this.store.head(key);
      if ((mode === 'create' && now !== undefined) || (mode === 'replace' && now?.etag !== etag)) throw moved();
      await this.store.put(key, body, { contentType: 'application/json' });
    }
    await this.store.put(this.historyKey(pipeline, next.version), body, { contentType: 'application/json' });
    // Last: the store's own document already names these bytes, so a crash before this put leaves the previous ones,
    // which it names too (`previous`).
    if (singer.key !== undefined && singer.body !== undefined) {
      await this.store.put(singer.key, singer.body, { contentType: 'application/json' });
      this.settled.delete(pipeline);
    }
  }

  async history(pipeline: string): Promise<readonly PipelineStateVersion[]> {
    const byVersion = new Map<number, PipelineStateVersion>();
    for await (const info of this.store.list(this.historyPrefix(pipeline))) {
      if (!HISTORY_RE.test(info.key)) continue;
      const got = await this.store.get(info.key);
      if (!got) continue;
      try {
        const doc = this.parse(Buffer.from(got.body).toString('utf8'), pipeline, this.store.describe(info.key));
        byVersion.set(doc.version, { version: doc.version, savedAt: doc.savedAt, runId: doc.runId, reason: doc.reason, state: doc.state });
      } catch (error) {
        // One damaged old version must not hide the others.
        if (!(error instanceof CorruptStateError)) throw error;
      }
    }
    // A crash between the current document and its history copy leaves the copy missing; the current one counts.
    const current = await this.read(pipeline).catch(() => undefined);
    if (current && !byVersion.has(current.doc.version)) {
      const d = current.doc;
      byVersion.set(d.version, { version: d.version, savedAt: d.savedAt, runId: d.runId, reason: d.reason, state: d.state });
    }
    return [...byVersion.values()].sort((a, b) => b.version - a.version);
  }

  async pipelines(): Promise<readonly PipelineState[]> {
    const names = new Set<string>();
    for await (const info of this.store.list('_tidemark/store/')) {
      const m = /^_tidemark\/store\/([^/]+)\/state\.json$/.exec(info.key);
      if (m !== null) names.add(m[1]!);
    }
    const out: PipelineState[] = [];
    for (const name of [...names].sort()) {
      try {
        const state = await this.load(name);
        if (state !== undefined) out.push(state);
      } catch (error) {
        // A damaged document is reported by `state show` of that pipeline; the catalogue lists the others.
        if (!(error instanceof CorruptStateError) && !(error instanceof StateError)) throw error;
      }
    }
    return out;
  }

  async remove(pipeline: string): Promise<number> {
    const keys: string[] = [];
    for await (const info of this.store.list(this.historyPrefix(pipeline))) keys.push(info.key);
    const versions = keys.filter((k) => HISTORY_RE.test(k)).length;
    const current = (await this.store.head(this.current(pipeline))) !== undefined ? 1 : 0;
    // History first: a crash midway leaves the current document, still a valid state (a current document gone with
    // history left would read as damage).
    for (const key of keys) await this.store.delete(key);
    if (this.singer !== undefined && (await this.store.head(this.documentKey(pipeline))) !== undefined) await this.store.delete(this.documentKey(pipeline));
    if (current) await this.store.delete(this.current(pipeline));
    return Math.max(versions, current);
  }

  acquire(pipeline: string, options: LeaseOptions): Promise<Lease> {
    return this.leases.acquire(checkPipeline(pipeline), options);
  }

  holder(pipeline: string): Promise<LeaseHolder | undefined> {
    return this.leases.holder?.(checkPipeline(pipeline)) ?? Promise.resolve(undefined);
  }

  async close(): Promise<void> {
    await this.store.close();
  }
}
