/**
 * A place in a MySQL/MariaDB server's binary log as one comparable string. The log is a numbered sequence of files
 * (`mysql-bin.000001`, `mysql-bin.000002`, …) and a byte offset inside one; commits are written in commit order, so
 * (file number, offset) orders every transaction of one server. The text pads both to a fixed width so that plain
 * string comparison is that order: `0000000002:0000000004` is after `0000000001:0000001032`.
 */
import { SourceError } from '../../core/errors.js';

export interface BinlogCoordinates {
  /** The file's number: the digits after the last dot of its name. */
  readonly fileNumber: number;
  /** Byte offset in that file where the next event starts. */
  readonly offset: number;
}

const POSITION_RE = /^(\d{10}):(\d{10})$/;

/** The number of a binlog file name (`mysql-bin.000042` → 42). */
export function fileNumberOf(fileName: string): number {
  const m = /\.(\d+)$/.exec(fileName);
  if (!m) throw new SourceError(`binlog file name ${JSON.stringify(fileName)} does not end in a number`, { context: { phase: 'log' } });
  return Number(m[1]);
}

/** `basename.NNNNNN`: the server pads the number to six digits at least. */
export function fileNameOf(basename: string, fileNumber: number): string {
  return `${basename}.${String(fileNumber).padStart(6, '0')}`;
}

export function positionText(fileName: string, offset: number): string {
  return formatPosition({ fileNumber: fileNumberOf(fileName), offset });
}

export function formatPosition(c: BinlogCoordinates): string {
  return `${String(c.fileNumber).padStart(10, '0')}:${String(c.offset).padStart(10, '0')}`;
}

export function parsePosition(text: string): BinlogCoordinates {
  const m = POSITION_RE.exec(text);
  if (!m) throw new SourceError(`${JSON.stringify(text)} is not a binlog position (file number:offset, both 10 digits)`, { context: { phase: 'log' } });
  return { fileNumber: Number(m[1]), offset: Number(m[2]) };
}

/** Negative, zero or positive as `a` is before, at or after `b`. */
export function comparePositions(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
