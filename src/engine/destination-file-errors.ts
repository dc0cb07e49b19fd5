/**
 * A destination's file-system failures (a read-only directory, a full disk, a file where a directory should be) as
 * typed destination errors that name the pipeline, the config key, the path and what to do, instead of a bare
 * `EACCES: permission denied, mkdir '…'`. Node reports them with a code; DuckDB and SQLite with the OS's words.
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { PipelineConfig } from '../config/load.js';
import { DestinationError, TidemarkError } from '../core/errors.js';

interface FileProblem {
  readonly what: string;
  readonly remedy: string;
  /** The OS's wording, as engines that do not pass the code on report it. */
  readonly words: RegExp;
}

const PROBLEMS: Readonly<Record<string, FileProblem>> = {
  EACCES: { what: 'permission denied', remedy: 'give the user running tidemark write access to that directory, or point the key at one it can write', words: /permission denied/i },
  EPERM: { what: 'operation not permitted', remedy: 'give the user running tidemark write access to that directory, or point the key at one it can write', words: /operation not permitted/i },
  EROFS: { what: 'the file system is read-only', remedy: 'point the key at a writable file system (or remount it read-write)', words: /read-only file system/i },
  ENOSPC: { what: 'no space left on the device', remedy: 'free space on that file system or point the key at a larger one; the failed commit was rolled back', words: /no space left on device|database or disk is full/i },
  EDQUOT: { what: 'disk quota exceeded', remedy: "raise the user's quota or free space; the failed commit was rolled back", words: /quota exceeded/i },
  ENOTDIR: { what: 'a part of the path is a file, not a directory', remedy: 'fix the path: every part before the file name must be a directory', words: /not a directory/i },
};

/** SQLite's codes for the same failures. */
const ALIASES: Readonly<Record<string, string>> = { SQLITE_FULL: 'ENOSPC', SQLITE_READONLY: 'EROFS', SQLITE_READONLY_DIRECTORY: 'EROFS' };

/** The destination's key whose path failed, and that path. */
function destinationKey(pipeline: PipelineConfig): { key: string; path: string } | undefined {
  const d = pipeline.destination;
  if (d.type === 'duckdb' || d.type === 'sqlite') return { key: 'destination.path', path: d.path };
  if (d.type === 'files' && !d.location.startsWith('s3://')) return { key: 'destination.location', path: d.location };
  return undefined;
}

/**
 * The errno code of the failure or of one of its causes. An engine's wording counts only in a message about a file
 * (an I/O error, or one naming the destination's path), and only when no other layer claimed the error: "permission
 * denied" from a database server is no file's.
 */
function codeOf(error: unknown, destinationPath: string): { code: string; path?: string } | undefined {
  const wordsCount = !(error instanceof TidemarkError) || error.kind === 'destination' || error.kind === 'state';
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth += 1) {
    const errno = e as NodeJS.ErrnoException;
    const code = errno.code !== undefined ? (ALIASES[errno.code] ?? errno.code) : undefined;
    if (code === 'ENOENT' && errno.syscall === 'mkdir' && errno.path !== undefined) {
      // A recursive mkdir on a read-only or closed directory reports ENOENT: ask the nearest existing ancestor.
      const refused = ancestorRefusal(errno.path);
      if (refused !== undefined) return { code: refused, path: errno.path };
    }
    if (code !== undefined && PROBLEMS[code] !== undefined) return { code, ...(errno.path !== undefined ? { path: errno.path } : {}) };
    const aboutFile = /\bIO Error\b|disk I\/O error|unable to open database file/i.test(e.message) || e.message.includes(destinationPath);
    const named = wordsCount && aboutFile ? Object.entries(PROBLEMS).find(([, p]) => p.words.test(e.message)) : undefined;
    if (named) return { code: named[0] };
  }
  return undefined;
}

function ancestorRefusal(path: string): string | undefined {
  let at = dirname(path);
  while (!existsSync(at) && dirname(at) !== at) at = dirname(at);
  try {
    accessSync(at, constants.W_OK);
    return undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code !== undefined && PROBLEMS[code] !== undefined ? code : undefined;
  }
}

/** The failure as a typed destination error when it is a file-system one on a local destination; otherwise as it was. */
export function destinationFileError(error: unknown, pipeline: PipelineConfig): unknown {
  const where = destinationKey(pipeline);
  if (where === undefined) return error;
  const found = codeOf(error, where.path);
  if (found === undefined) return error;
  const problem = PROBLEMS[found.code]!;
  const path = found.path ?? where.path;
  const context = error instanceof TidemarkError ? error.context : {};
  return new DestinationError(`${where.key} (${where.path}): cannot write ${path}: ${problem.what} (${found.code}); ${problem.remedy}`, {
    context: { pipeline: pipeline.name, ...context, at: path },
    cause: error,
  });
}
