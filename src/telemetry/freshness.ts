/**
 * How old the newest loaded data is, from canonical cursor values. Only a cursor that is a time has an age: an id
 * cursor says nothing about time, and its stream reports none rather than a made-up figure.
 */

/** Canonical dates and timestamps (`YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM]`); bare timestamps are UTC. */
const TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

export function cursorTimeMs(cursor: string | null | undefined): number | undefined {
  if (cursor === null || cursor === undefined) return undefined;
  const match = TIME.exec(cursor);
  if (!match) return undefined;
  const text = cursor.length > 10 && match[1] === undefined ? `${cursor.replace(' ', 'T')}Z` : cursor.replace(' ', 'T');
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? undefined : ms;
}

/** Seconds between now and the newest cursor value, when that value is a time. */
export function newestRowAgeSeconds(cursor: string | null | undefined, nowMs = Date.now()): number | undefined {
  const at = cursorTimeMs(cursor);
  return at === undefined ? undefined : Math.max(0, (nowMs - at) / 1000);
}

/** Log streams: seconds between now and the source commit time of the newest change applied. */
export function sourceLagSeconds(commitTime: string | undefined, nowMs = Date.now()): number | undefined {
  return newestRowAgeSeconds(commitTime, nowMs);
}
