/**
 * A caller-chosen upper bound of a read (`tidemark run --until`, PyCharter's UNTIL): text typed by the cursor
 * column's type, capping the read's `until` so the committed watermark never passes it.
 */
import type { ReadRequest } from './connector.js';
import { ConfigError } from './errors.js';
import type { TypedValue } from './types.js';
import { compareCanonical, parseTyped } from './values.js';

/** The `--until` text as a value of the cursor's type; a value that is not one is a config error naming both. */
export function callerBound(kind: TypedValue['type'], text: string): TypedValue {
  try {
    return parseTyped(kind, text);
  } catch (cause) {
    throw new ConfigError(`--until ${JSON.stringify(text)} is not a ${kind} value (the cursor's type): ${(cause as Error).message}`, { cause, context: { phase: 'plan' } });
  }
}

/** `until` lowered to the caller's bound (`ReadRequest.untilAtMost`). */
export function capAtCallerBound(until: TypedValue | null, request: Pick<ReadRequest, 'untilAtMost'>): TypedValue | null {
  if (until === null || request.untilAtMost === undefined) return until;
  const cap = callerBound(until.type, request.untilAtMost);
  return compareCanonical(until.type, cap.value, until.value) < 0 ? cap : until;
}

/** True when a read planned to pass the caller's bound: its source did not apply `untilAtMost`. */
export function passesCallerBound(until: TypedValue | null, bound: string | undefined): boolean {
  if (until === null || bound === undefined) return false;
  return compareCanonical(until.type, until.value, callerBound(until.type, bound).value) > 0;
}
