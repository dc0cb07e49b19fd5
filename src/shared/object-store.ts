/**
 * Object-store access shared by the files source, the files destination and the bucket state store: one small
 * interface over a local directory and an S3-compatible bucket. Keys are '/'-separated and relative to the
 * location's root (the directory, or the bucket prefix). The AWS SDK is imported only for `s3://` locations.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { link, mkdir, open, readFile, readdir, rename, rm, stat, unlink, writeFile, copyFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { ConflictError, SourceError } from '../core/errors.js';
import { randomHex } from '../core/ids.js';
import { nodeCrypto, nodeStreams } from './lazy-modules.js';

export interface ObjectInfo {
  readonly key: string;
  readonly size: number;
  /** ISO 8601; a local file's at its full precision (nanoseconds: `2024-01-02T03:04:05.123456789Z`). */
  readonly modified: string;
  /** The server's entity tag (quotes stripped); local listings leave it out, since it would mean reading content. */
  readonly etag?: string;
  /**
   * Local files only: the inode change time (ISO 8601, nanoseconds), which moves with every write and every
   * `utime` and cannot be set back — so a rewrite that restores size and mtime (`cp -p`, `rsync -t`) still shows.
   */
  readonly changed?: string;
  /** Local files only: `<device>:<inode>`; a file replaced by another one (a rename over it) gets a new one. */
  readonly inode?: string;
}

export interface ListOptions {
  /**
   * Local directories: follow symbolic links to files and directories (keys are the links' paths). A link that
   * leads nowhere, or to a directory already being listed (a loop), is passed to `skipped` with the reason instead.
   * Off by default: writers (a lake's clean-up) must never delete through a link.
   */
  readonly followLinks?: boolean;
  readonly skipped?: (key: string, reason: string, kind: 'dangling' | 'loop') => void;
}

export interface PutOptions {
  /** Create only: fails with ConflictError when the key exists. */
  readonly ifNoneMatch?: '*';
  /** Replace only this version: fails with ConflictError when the stored ETag differs. */
  readonly ifMatch?: string;
  readonly contentType?: string;
}

export interface ObjectStore {
  /** The location as configured (`/data/taxi`, `s3://bucket/prefix`). */
  readonly location: string;
  /** The address of a key for messages (`s3://bucket/prefix/key`, or a local path). */
  describe(key: string): string;
  /** Every object whose key starts with `prefix`, in no particular order. Reads metadata only. */
  list(prefix?: string, signal?: AbortSignal, options?: ListOptions): AsyncIterable<ObjectInfo>;
  /** Metadata of one object (stat / HEAD), or undefined when it does not exist. */
  head(key: string): Promise<ObjectInfo | undefined>;
  /** A path the local file system can open directly, when the store is local (no copy needed). */
  localPath(key: string): string | undefined;
  /** Streams an object into `file` (never whole in memory); returns what was fetched, with its ETag when known. */
  download(key: string, file: string, signal?: AbortSignal): Promise<ObjectInfo>;
  /** A small object's content (manifests, state), or undefined when it does not exist. */
  get(key: string): Promise<{ readonly body: Uint8Array; readonly info: ObjectInfo } | undefined>;
  put(key: string, body: Uint8Array | string, options?: PutOptions): Promise<ObjectInfo>;
  /** Uploads a local file (multipart for large ones). */
  upload(key: string, file: string, options?: Omit<PutOptions, 'ifMatch'>): Promise<ObjectInfo>;
  delete(key: string): Promise<void>;
  close(): Promise<void>;
}

export interface S3Credentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string;
}

export interface ObjectStoreOptions {
  readonly endpoint?: string;
  readonly region?: string;
  readonly credentials?: S3Credentials;
  /** Default: true when an endpoint is given (S3-compatible servers rarely have virtual-host DNS). */
  readonly forcePathStyle?: boolean;
}

export function isBucketLocation(location: string): boolean {
  return /^s3:\/\//i.test(location);
}

/** Why a location cannot be opened (a URL of another scheme than s3://), or undefined; config validation asks too. */
export function unsupportedLocation(location: string): string | undefined {
  if (isBucketLocation(location) || !/^[a-z][a-z0-9+.-]*:\/\//i.test(location)) return undefined;
  return `location ${location}: only local directories and s3:// buckets are supported`;
}

export async function openObjectStore(location: string, options: ObjectStoreOptions = {}): Promise<ObjectStore> {
  if (isBucketLocation(location)) {
    const { S3ObjectStore } = await import('./object-store-s3.js');
    return S3ObjectStore.create(location, options);
  }
  const unsupported = unsupportedLocation(location);
  if (unsupported !== undefined) throw new SourceError(unsupported, { context: { phase: 'connect' } });
  return new LocalObjectStore(resolve(location));
}

/** `a/b/c` → safe relative parts; refuses keys that would leave the root. */
export function checkKey(key: string): string {
  const parts = key.split('/');
  if (key === '' || key.startsWith('/') || parts.includes('..') || key.includes('\u0000')) {
    throw new SourceError(`object key ${JSON.stringify(key)} is not a relative path inside the location`);
  }
  return key;
}

export function md5Hex(body: Uint8Array): string {
  return nodeCrypto().createHash('md5').update(body).digest('hex');
}

/** Streams a file through a hash; never holds the file in memory. */
export async function hashFile(file: string, algorithm = 'sha256'): Promise<string> {
  const hash = nodeCrypto().createHash(algorithm);
  await nodeStreams().pipeline(createReadStream(file, { highWaterMark: 1 << 20 }), hash);
  return hash.digest('hex');
}

/** Nanoseconds since the epoch as ISO 8601 with nine fractional digits (Date keeps milliseconds only). */
export function isoNanos(ns: bigint): string {
  const million = 1_000_000n;
  const sub = ((ns % million) + million) % million;
  const ms = (ns - sub) / million;
  return `${new Date(Number(ms)).toISOString().slice(0, -1)}${String(sub).padStart(6, '0')}Z`;
}

const TEMP_PREFIX = '.tidemark-tmp-';

/** A directory as an object store. Writes go to a temp file beside the target and are renamed into place. */
export class LocalObjectStore implements ObjectStore {
  constructor(readonly root: string) {}

  get location(): string {
    return this.root;
  }

  describe(key: string): string {
    return join(this.root, ...key.split('/'));
  }

  localPath(key: string): string {
    return join(this.root, ...checkKey(key).split('/'));
  }

  async *list(prefix = '', _signal?: AbortSignal, options: ListOptions = {}): AsyncIterable<ObjectInfo> {
    // Walk only the directory the prefix names, not the whole tree.
    const slash = prefix.lastIndexOf('/');
    const start = slash >= 0 ? prefix.slice(0, slash) : '';
    const startDir = start ? join(this.root, ...start.split('/')) : this.root;
    const pending = [startDir];
    // Directories by device and inode: a link back to one of them would walk for ever.
    const seen = new Set<string>();
    while (pending.length > 0) {
      const dir = pending.pop()!;
      if (options.followLinks) {
        const id = await stat(dir, { bigint: true }).then((s) => `${s.dev}:${s.ino}`, () => undefined);
        if (id !== undefined && seen.has(id)) {
          options.skipped?.(this.keyOf(dir), 'a symbolic link to a directory already listed (a loop, or a second link to it)', 'loop');
          continue;
        }
        if (id !== undefined) seen.add(id);
      }
      let entries;
      try {
        entries = await readdir(dir, { withFileTypes: true });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT' && dir !== this.root) continue;
        throw new SourceError(`cannot list ${dir}: ${(error as Error).message}`, { cause: error, context: { phase: 'list' } });
      }
      const files: string[] = [];
      for (const entry of entries) {
        const full = join(dir, entry.name);
        const key = this.keyOf(full);
        let kind: 'dir' | 'file' | undefined = entry.isDirectory() ? 'dir' : entry.isFile() ? 'file' : undefined;
        if (entry.isSymbolicLink() && options.followLinks && (key.startsWith(prefix) || prefix.startsWith(`${key}/`))) {
          const target = await stat(full).catch((error: NodeJS.ErrnoException) => error);
          if (target instanceof Error) options.skipped?.(key, `a symbolic link that leads nowhere (${target.code ?? target.message})`, 'dangling');
          else kind = target.isDirectory() ? 'dir' : target.isFile() ? 'file' : undefined;
        }
        if (kind === 'dir') {
          if (key.startsWith(prefix) || prefix.startsWith(`${key}/`)) pending.push(full);
          continue;
        }
        if (kind === 'file' && !entry.name.startsWith(TEMP_PREFIX) && key.startsWith(prefix)) files.push(key);
      }
      // A directory's files are stat-ed side by side: one round trip to the thread pool instead of one per file.
      for (const info of await Promise.all(files.map((key) => this.head(key)))) if (info) yield info;
    }
  }

  private keyOf(path: string): string {
    return relative(this.root, path).split(sep).join('/');
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    try {
      const s = await stat(this.localPath(key), { bigint: true });
      if (!s.isFile()) return undefined;
      return { key, size: Number(s.size), modified: isoNanos(s.mtimeNs), changed: isoNanos(s.ctimeNs), inode: `${s.dev}:${s.ino}` };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  async download(key: string, file: string): Promise<ObjectInfo> {
    const info = await this.head(key);
    if (!info) throw new SourceError(`${this.describe(key)} does not exist`);
    await copyFile(this.localPath(key), file);
    return info;
  }

  async get(key: string): Promise<{ body: Uint8Array; info: ObjectInfo } | undefined> {
    try {
      const body = await readFile(this.localPath(key));
      const info = await this.head(key);
      if (!info) return undefined;
      return { body, info: { ...info, etag: md5Hex(body) } };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  async put(key: string, body: Uint8Array | string, options: PutOptions = {}): Promise<ObjectInfo> {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    const target = this.localPath(key);
    await mkdir(dirname(target), { recursive: true });
    const temp = join(dirname(target), `${TEMP_PREFIX}${process.pid}-${randomHex(8)}`);
    await writeFile(temp, bytes, { flush: true });
    try {
      await this.place(key, temp, options);
    } finally {
      await rm(temp, { force: true });
    }
    const info = await this.head(key);
    return { ...info!, etag: md5Hex(bytes) };
  }

  async upload(key: string, file: string, options: Omit<PutOptions, 'ifMatch'> = {}): Promise<ObjectInfo> {
    const target = this.localPath(key);
    await mkdir(dirname(target), { recursive: true });
    const temp = join(dirname(target), `${TEMP_PREFIX}${process.pid}-${randomHex(8)}`);
    await copyFile(file, temp);
    try {
      await this.place(key, temp, options);
    } finally {
      await rm(temp, { force: true });
    }
    return (await this.head(key))!;
  }

  /**
   * Moves a written temp file into place. Create-only uses link(), which fails atomically when the target exists;
   * replace-if-match holds a lock file while it compares, so two writers cannot both win.
   */
  private async place(key: string, temp: string, options: PutOptions): Promise<void> {
    const target = this.localPath(key);
    if (options.ifNoneMatch === '*') {
      try {
        await link(temp, target);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EEXIST') throw new ConflictError(`${this.describe(key)} already exists`, { cause: error });
        throw error;
      }
      return;
    }
    if (options.ifMatch === undefined) {
      await rename(temp, target);
      return;
    }
    const lock = `${target}.lock`;
    let handle;
    try {
      handle = await open(lock, 'wx');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') throw new ConflictError(`${this.describe(key)} is being written by another process`, { cause: error });
      throw error;
    }
    try {
      const current = await this.get(key);
      if (current?.info.etag !== options.ifMatch) {
        throw new ConflictError(`${this.describe(key)} changed (expected ETag ${options.ifMatch}, found ${current?.info.etag ?? 'none'})`);
      }
      await rename(temp, target);
    } finally {
      await handle.close();
      await unlink(lock).catch(() => undefined);
    }
  }

  async delete(key: string): Promise<void> {
    await rm(this.localPath(key), { force: true });
  }

  async close(): Promise<void> {}
}

/** Writes a web stream or Node stream body to a file. */
export async function writeBodyToFile(body: unknown, file: string, signal?: AbortSignal): Promise<void> {
  const { Readable, pipeline } = nodeStreams();
  const readable = body instanceof Readable ? body : Readable.fromWeb(body as import('node:stream/web').ReadableStream);
  await pipeline(readable, createWriteStream(file), ...(signal ? [{ signal }] : []));
}
