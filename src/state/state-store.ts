/**
 * What every state store outside the destination offers: the StateStore seam, a lease provider for the pipeline
 * lock, and `repair` for the engine's reconciliation. The destination stays the record of committed loads; such a
 * store is a copy the engine checks against it at every run (DESIGN.md §1, promise 2).
 */
import type { LeaseProvider, SaveMeta, StateStore } from '../core/connector.js';
import { StateError, type ErrorContext } from '../core/errors.js';
import type { PipelineState, PipelineStateVersion, RejectRecord, RunRecord } from '../core/types.js';

export interface ExternalStateStore extends StateStore, LeaseProvider {
  /** Where the store is, for messages; never contains a password. */
  readonly description: string;
  /**
   * Writes `next` as the current state whatever is stored now (a torn or corrupt document, or a version behind the
   * destination). The replaced document stays in history when it was readable.
   */
  repair(next: PipelineState, meta: SaveMeta): Promise<void>;
  /** The current state of every pipeline the store holds, by name (`tidemark state list`); unreadable ones are left out. */
  pipelines(): Promise<readonly PipelineState[]>;
  /** Removes a pipeline's current state and its whole history; returns how many versions were removed (0: none). */
  remove(pipeline: string): Promise<number>;
  /** Set when the store also keeps a copy of the state users may edit by hand (a bucket's Singer document). */
  readonly editableDocument?: EditableDocument;
}

/** A readable copy of the state written beside the store's own (the Singer document of a bucket store). */
export interface EditableDocument {
  /** The copy as it is now; `edited` when its bytes are not what the store last wrote there. */
  read(pipeline: string): Promise<DocumentCopy>;
  /** The engine has taken `copy` into account (adopted its edit): the next save may write over it. */
  settle(pipeline: string, copy: DocumentCopy): void;
}

export interface DocumentCopy {
  readonly key: string;
  /** Where it is, for messages (`s3://bucket/.dataspoc/state/p/state.json`). */
  readonly where: string;
  /** undefined: no object at the key (it is written at the next save). */
  readonly text: string | undefined;
  readonly edited: boolean;
  /** The state version the store last wrote the copy from, when it wrote one. */
  readonly writtenFrom?: number;
}

/**
 * The stored state exists but cannot be read (torn, empty, not JSON, wrong shape). Never the same as "no state":
 * the engine repairs it from the destination, or stops.
 */
export class CorruptStateError extends StateError {
  constructor(message: string, options: { context?: ErrorContext; cause?: unknown } = {}) {
    super(message, options);
  }
}

/** Parses one stored state document; anything but a well-formed state of this pipeline is corruption. */
export function parseStoredState(text: string, pipeline: string, where: string): PipelineState {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (cause) {
    throw new CorruptStateError(`state of pipeline ${pipeline} in ${where} is not valid JSON (torn or damaged)`, { context: { pipeline }, cause });
  }
  const state = parsed as Partial<PipelineState> | null;
  if (
    state === null ||
    typeof state !== 'object' ||
    typeof state.version !== 'number' ||
    !Number.isInteger(state.version) ||
    state.version < 0 ||
    state.streams === null ||
    typeof state.streams !== 'object' ||
    Array.isArray(state.streams)
  ) {
    throw new CorruptStateError(`state of pipeline ${pipeline} in ${where} has no valid version and streams`, { context: { pipeline } });
  }
  return { pipeline, version: state.version, streams: state.streams as PipelineState['streams'] };
}

/**
 * Runs, rejects and the ledger stay in the destination, written by the same commit as the data; a separate store
 * keeps only state. These defaults say so.
 */
export abstract class StateOnlyStore {
  async runs(_pipeline: string, _limit: number): Promise<readonly RunRecord[]> {
    return [];
  }

  async rejects(_pipeline: string, _limit: number, _stream?: string): Promise<readonly RejectRecord[]> {
    return [];
  }

  async closeInterruptedRuns(_pipeline: string): Promise<void> {}

  async recordFailure(_run: RunRecord): Promise<void> {}
}

export type { PipelineStateVersion };

/** The JSON document a file or bucket store keeps per state version. */
export interface StoredDocument {
  readonly format: 'tidemark-state';
  readonly version: number;
  readonly savedAt: string;
  readonly runId: string | null;
  readonly reason: string;
  readonly state: PipelineState;
  /** Bucket stores with `singer_document`: what was last written at the document's key (see bucket-state-store.ts). */
  readonly singerDocument?: SingerDocumentMark;
}

/**
 * The Singer state document a store last wrote beside its own: the key, the state version it was rendered from and
 * the SHA-256 of its bytes, and of the bytes written before them (a crash between the two writes leaves those). Any
 * other content at the key was put there by someone else: a hand edit.
 */
export interface SingerDocumentMark {
  readonly key: string;
  readonly version: number;
  readonly sha256: string;
  readonly previous?: string;
}

function parseMark(value: unknown): SingerDocumentMark | undefined {
  const m = value as Partial<SingerDocumentMark> | null | undefined;
  if (m === null || typeof m !== 'object' || typeof m.key !== 'string' || typeof m.version !== 'number' || typeof m.sha256 !== 'string') return undefined;
  return { key: m.key, version: m.version, sha256: m.sha256, ...(typeof m.previous === 'string' ? { previous: m.previous } : {}) };
}

/** Parses a stored document; `what` names it in errors (`state file …`, `state object …`). Anything off is corruption. */
export function parseStoredDocument(text: string, pipeline: string, what: string): StoredDocument {
  let doc: Partial<StoredDocument>;
  try {
    doc = JSON.parse(text) as Partial<StoredDocument>;
  } catch (cause) {
    throw new CorruptStateError(`${what} is not valid JSON (torn or damaged)`, { context: { pipeline }, cause });
  }
  if (doc === null || typeof doc !== 'object' || doc.format !== 'tidemark-state') {
    throw new CorruptStateError(`${what} is not a tidemark state document`, { context: { pipeline } });
  }
  const where = what.replace(/^state (file|object) /, '');
  const state = parseStoredState(JSON.stringify(doc.state ?? null), pipeline, where);
  if (state.version !== doc.version) throw new CorruptStateError(`${what} disagrees with itself about its version`, { context: { pipeline } });
  const mark = parseMark(doc.singerDocument);
  return { format: 'tidemark-state', version: state.version, savedAt: String(doc.savedAt), runId: doc.runId ?? null, reason: String(doc.reason ?? ''), state, ...(mark ? { singerDocument: mark } : {}) };
}
