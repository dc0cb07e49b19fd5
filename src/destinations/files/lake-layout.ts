/**
 * Where everything lives in a lake, and the two documents of its commit protocol.
 *
 * ```
 * <location>/<stream>/[<column>=<value>/]part-<load_id>-<n>.<ext>     data objects, never overwritten
 * <location>/_tidemark/manifests/<pipeline>/<commit>-<load_id>.json   one manifest per commit
 * <location>/_tidemark/rejects/<pipeline>/<stream>/rejects-<load_id>.jsonl
 * <location>/_tidemark/runs/<pipeline>/<run_id>--<stream>.json        failures recorded outside a commit
 * <location>/_tidemark/state/<pipeline>/state.json                    the commit point
 * <location>/_tidemark/owners/<stream>.json                            the pipeline that owns <stream>/ (lake-owners.ts)
 * <location>/_tidemark/locks/<pipeline>/…                             the lease (local directories)
 * ```
 *
 * A manifest names every data object of the pipeline's tables as of its commit (a snapshot, not a delta), with the
 * state, ledger (with each loaded partition's checksum) and recent run records. `state.json` names the committed manifest; it is written last, so an
 * object that no committed manifest names belongs to a run that never committed.
 */
import type { FileFormat } from '../../core/connector.js';
import { DestinationError } from '../../core/errors.js';
import { nodeCrypto } from '../../shared/lazy-modules.js';
import type { LedgerEntry, PartitionChecksum, PartitionFailure, PipelineState, RunRecord, StreamState } from '../../core/types.js';

export type LakeCompression = 'zstd' | 'snappy' | 'gzip' | 'none';

/** One data object of a table. */
export interface LakeFile {
  readonly key: string;
  readonly rows: number;
  readonly bytes: number;
  /** Set when the object holds the rows of one partition only (delete+insert replaces by it). */
  readonly partition?: { readonly column: string; readonly value: string };
}

export interface LakeColumn {
  readonly name: string;
  /** The DuckDB SQL type the column was written as. */
  readonly type: string;
}

export interface LakeTable {
  readonly format: FileFormat;
  readonly columns: readonly LakeColumn[];
  readonly files: readonly LakeFile[];
}

/**
 * A partition's count and checksum as its commit computed them over exactly the objects it wrote (see
 * `PartitionChecksum`); kept in the manifest beside the partition's ledger row, so both commit together.
 */
export interface LakePartitionChecksum extends PartitionChecksum {
  readonly stream: string;
}

export interface LakeBuild extends LakeTable {
  readonly generation: string;
}

export interface LakeManifest {
  readonly format: 'tidemark-lake-manifest';
  readonly formatVersion: 1;
  readonly pipeline: string;
  /** Grows by one with every commit (also commits that do not change the state, like a ledger edit). */
  readonly commit: number;
  readonly key: string;
  readonly previous: string | null;
  readonly committedAt: string;
  readonly runId: string | null;
  readonly reason: string;
  /** Whether this commit wrote a new state version (history shows only those). */
  readonly stateChanged: boolean;
  readonly state: PipelineState | null;
  /** The highest fencing token that has committed; an older one is a zombie. */
  readonly fence: number;
  readonly tables: Readonly<Record<string, LakeTable>>;
  readonly builds: Readonly<Record<string, LakeBuild>>;
  readonly ledger: readonly LedgerEntry[];
  /** The last failed load of partitions (a commit of its own); absent in manifests from before they were kept. */
  readonly failures?: readonly PartitionFailure[];
  /**
   * Per loaded partition, the checksum its commit computed over the objects it wrote; absent in manifests from before
   * they were kept (and for partitions loaded then), whose `ledger verify` compares counts only.
   */
  readonly checksums?: readonly LakePartitionChecksum[];
  /** Recent run records (the newest RUNS_KEPT). */
  readonly runs: readonly RunRecord[];
  /** Reject files per stream. */
  readonly rejects: Readonly<Record<string, readonly string[]>>;
}

/** A Singer bookmark, so Singer tooling can read where each stream stands. */
export interface SingerBookmark {
  readonly replication_key?: string;
  readonly replication_key_value?: string;
  readonly tidemark_pk?: readonly string[];
}

/** `state.json`: Singer `bookmarks` plus tidemark's own fields. */
export interface LakeStateDocument {
  readonly bookmarks: Readonly<Record<string, SingerBookmark>>;
  readonly currently_syncing: null;
  readonly tidemark: {
    readonly format: 'tidemark-lake-state';
    readonly pipeline: string;
    readonly version: number;
    readonly commit: number;
    readonly manifest: string;
    readonly fence: number;
    readonly savedAt: string;
    readonly runId: string | null;
    readonly state: PipelineState | null;
  };
}

/** The config's rule for names (config/schema.ts), repeated here so a library user's names are checked too. */
const NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

export const RUNS_KEPT = 200;
/** Committed manifests older than this many commits are removed by garbage collection. */
export const MANIFESTS_KEPT = 500;

export const keys = {
  state: (pipeline: string) => `_tidemark/state/${pipeline}/state.json`,
  manifests: (pipeline: string) => `_tidemark/manifests/${pipeline}/`,
  manifest: (pipeline: string, commit: number, loadId: string) => `_tidemark/manifests/${pipeline}/${String(commit).padStart(12, '0')}-${loadId}.json`,
  rejectsDir: (pipeline: string, stream: string) => `_tidemark/rejects/${pipeline}/${stream}/`,
  rejects: (pipeline: string, stream: string, loadId: string) => `_tidemark/rejects/${pipeline}/${stream}/rejects-${loadId}.jsonl`,
  runsDir: (pipeline: string) => `_tidemark/runs/${pipeline}/`,
  run: (pipeline: string, runId: string, stream: string) => `_tidemark/runs/${pipeline}/${runId}--${stream}.json`,
  locks: '_tidemark/locks',
  streamDir: (stream: string) => `${stream}/`,
};

const MANIFEST_RE = /^(\d{12})-[^/]+\.json$/;

/** The commit number of a manifest key, or undefined for anything else. */
export function manifestCommit(pipeline: string, key: string): number | undefined {
  const prefix = keys.manifests(pipeline);
  if (!key.startsWith(prefix)) return undefined;
  const m = MANIFEST_RE.exec(key.slice(prefix.length));
  return m ? Number(m[1]) : undefined;
}

/** Pipeline and stream names become path segments: the same rule as the config, checked again for library users. */
export function checkName(what: 'pipeline' | 'stream' | 'column', name: string): string {
  if (!NAME_RE.test(name) || name.includes('..')) {
    throw new DestinationError(`${what} name ${JSON.stringify(name)} cannot be used in a lake path (letters, digits, "_", "-" and "." only; no "..", "/" or NUL)`, {
      context: { phase: 'plan' },
    });
  }
  return name;
}

/**
 * A partition id that becomes a directory (`month=2024-01`). Ids that would leave the table's directory or are not
 * representable as one path segment are refused, not rewritten: a silent rename would hide the partition.
 */
export function checkPartitionValue(value: string): string {
  if (value === '' || value === '.' || value === '..' || /[/\\\u0000-\u001f]/.test(value) || value.includes('..')) {
    throw new DestinationError(`partition ${JSON.stringify(value)} cannot be used as a lake directory (no "/", "\\", "..", NUL or control characters)`, {
      context: { phase: 'load' },
    });
  }
  return value;
}

/** The longest directory name most file systems and object-store tools accept (bytes). */
export const SEGMENT_MAX_BYTES = 255;
/** Hex digits of the SHA-256 that names a value too long for a directory (128 bits: collisions are not a concern). */
const LONG_HASH_HEX = 32;

/**
 * A data value as a Hive-style directory segment `column=<value>` that Hive-style readers (DuckDB's
 * `hive_partitioning`, Spark, Trino) decode back to the same value: NULL is `__HIVE_DEFAULT_PARTITION__`, `''` is
 * `column=` (nothing after the `=`), and every other value is percent-encoded (letters, digits, `_ - : +` and inner
 * spaces stay as they are). A literal value that a reader would take for a marker (`NULL`, `null`,
 * `__HIVE_DEFAULT_PARTITION__`, in any case) gets its first character encoded (`%4EULL`), so it stays a string.
 *
 * A segment longer than 255 bytes cannot be a directory name: such a value is named
 * `column=<encoded prefix>~<32 hex digits of the SHA-256 of the value>` (at most 255 bytes). `~` is always encoded
 * in a normal name, so a long name never equals another value's; a Hive reader shows that name, and the file's own
 * column holds the whole value (read it with `hive_partitioning = false`).
 */
function encodeChar(c: string): string {
  return [...Buffer.from(c, 'utf8')].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join('');
}

function encodeValue(value: string): string {
  return value.replace(/[^A-Za-z0-9_\-:+ ]|^ | $/gu, encodeChar);
}

export function hiveSegment(column: string, value: string | null): string {
  if (value === null) return `${column}=__HIVE_DEFAULT_PARTITION__`;
  let encoded = encodeValue(value);
  if (/^(null|__hive_default_partition__)$/i.test(encoded)) encoded = `${encodeChar(encoded[0]!)}${encoded.slice(1)}`;
  const segment = `${column}=${encoded}`;
  if (Buffer.byteLength(segment) <= SEGMENT_MAX_BYTES) return segment;
  const hash = nodeCrypto().createHash('sha256').update(value, 'utf8').digest('hex').slice(0, LONG_HASH_HEX);
  // The prefix ends at a whole character, so it still decodes as UTF-8.
  const budget = SEGMENT_MAX_BYTES - column.length - 2 - LONG_HASH_HEX;
  let prefix = '';
  for (const c of value) {
    const piece = encodeValue(c);
    if (prefix.length + piece.length > budget) break;
    prefix += piece;
  }
  return `${column}=${prefix}~${hash}`;
}

export function extensionOf(format: FileFormat, compression: LakeCompression): string {
  const base = format === 'parquet' ? 'parquet' : format;
  if (format === 'parquet' || compression === 'none' || compression === 'snappy') return base;
  return `${base}.${compression === 'gzip' ? 'gz' : 'zst'}`;
}

/** Singer bookmarks for a state: the cursor column and the canonical value of the last committed row. */
export function bookmarksOf(state: PipelineState | null): Record<string, SingerBookmark> {
  const out: Record<string, SingerBookmark> = {};
  for (const [name, s] of Object.entries(state?.streams ?? {}) as [string, StreamState][]) {
    out[name] = {
      ...(s.cursorColumn !== undefined ? { replication_key: s.cursorColumn } : {}),
      ...(s.watermark ? { replication_key_value: s.watermark.cursor.value, tidemark_pk: s.watermark.pk.map((v) => v.value) } : {}),
    };
  }
  return out;
}

export function emptyManifest(pipeline: string): LakeManifest {
  return {
    format: 'tidemark-lake-manifest',
    formatVersion: 1,
    pipeline,
    commit: 0,
    key: '',
    previous: null,
    committedAt: new Date(0).toISOString(),
    runId: null,
    reason: 'empty',
    stateChanged: false,
    state: null,
    fence: 0,
    tables: {},
    builds: {},
    ledger: [],
    runs: [],
    rejects: {},
  };
}

/** The failures of partitions other than those `entries` name (a commit writing a partition's ledger row clears its failure). */
export function withoutFailures(failures: readonly PartitionFailure[], entries: readonly Pick<LedgerEntry, 'stream' | 'partition'>[]): PartitionFailure[] {
  const cleared = new Set(entries.map((e) => `${e.stream}\u0000${e.partition}`));
  return failures.filter((f) => !cleared.has(`${f.stream}\u0000${f.partition}`));
}

/**
 * The checksums after a commit that writes the ledger rows `entries`: theirs are dropped, and `loaded` (the
 * checksum of the partition this commit loaded, when it did) is added.
 */
export function nextChecksums(
  checksums: readonly LakePartitionChecksum[],
  entries: readonly Pick<LedgerEntry, 'stream' | 'partition'>[],
  loaded: LakePartitionChecksum | undefined,
): LakePartitionChecksum[] {
  const replaced = new Set(entries.map((e) => `${e.stream}\u0000${e.partition}`));
  return [...checksums.filter((c) => !replaced.has(`${c.stream}\u0000${c.partition}`)), ...(loaded !== undefined ? [loaded] : [])];
}

/** Parses a manifest; anything else is damage (a reader must never trust a half-written one). */
export function parseManifest(text: string, where: string): LakeManifest {
  let doc: Partial<LakeManifest>;
  try {
    doc = JSON.parse(text) as Partial<LakeManifest>;
  } catch (cause) {
    throw new DestinationError(`manifest ${where} is not valid JSON (torn or damaged)`, { cause });
  }
  if (doc === null || typeof doc !== 'object' || doc.format !== 'tidemark-lake-manifest' || typeof doc.commit !== 'number' || typeof doc.tables !== 'object') {
    throw new DestinationError(`manifest ${where} is not a tidemark lake manifest`);
  }
  return doc as LakeManifest;
}
