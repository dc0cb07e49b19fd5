/**
 * `tidemark verify --repair`: the differing keys of a merge stream reloaded from the source in one commit of the
 * normal commit rule (data, state version and run record together, fenced by the pipeline lease): missing and changed
 * rows upserted, extra rows deleted. An append stream keeps every row version, so it is refused, as state edits are.
 */
import type { Destination, Lease } from '../core/connector.js';
import { newRunId } from '../core/ids.js';
import { finishedAt } from '../core/run-clock.js';
import type { Column, ColumnType, PipelineState, Row, StreamSchema, Value } from '../core/types.js';
import { rowsByKey } from './table-diff.js';
import { runMarks } from './run-marks.js';
import { runRecordFor } from './stream-load.js';
import type { KeyValues, StreamVerify, VerifyTarget } from './verify.js';

export interface StreamRepair {
  /** Rows written (missing and changed keys) and deleted (extra keys); absent when refused. */
  readonly upserted?: number;
  readonly deleted?: number;
  readonly refused?: string;
}

/** Why a stream's drift is not repaired by reloading keys, or undefined when it is. */
export function repairRefusal(target: VerifyTarget, destination: Destination): string | undefined {
  if (!destination.capabilities.writes.includes('merge')) {
    return 'this destination cannot rewrite rows in place (the lake only adds objects); rebuild the stream with `tidemark state reset` (the next run loads a new generation)';
  }
  if (target.stream.write === 'append') return 'an append stream keeps every row version: reloading keys would append them again; rebuild it with `tidemark state reset` (the next run loads a new generation)';
  if (target.stream.write === 'replace') return 'a full-refresh stream is rebuilt whole by its next run';
  return undefined;
}

export async function repairStream(
  context: { readonly pipeline: string; readonly destination: Destination; readonly lease: Lease; readonly state: PipelineState },
  target: VerifyTarget,
  found: StreamVerify,
  schema: StreamSchema,
): Promise<{ readonly repair: StreamRepair; readonly state: PipelineState }> {
  const keyList = (keys: readonly KeyValues[]) => keys.map((k) => target.shape.key.map((c) => k[c.name]!));
  const reload = keyList([...found.missing, ...found.changed.map((c) => c.key)]);
  // Through the source's watermark filter: a repair reloads only what the stream has promised so far.
  const texts = reload.length > 0 ? await rowsByKey(target.source, target.shape, reload) : [];
  const upserts: Row[] = texts.map((t) => schema.columns.map((column) => {
    const at = target.shape.columns.findIndex((c) => c.name === column.name);
    return at < 0 ? null : valueOf(column, t[at] ?? null);
  }));
  const keyColumns = schema.primaryKey.map((name) => schema.columns.find((c) => c.name === name)!);
  const extraKeys = keyList(found.extra).map((key) => key.map((text, i) => valueOf(keyColumns[i]!, text)));
  // A soft-delete mirror keeps a deleted row, marked: an extra row is marked deleted now, as the log would have.
  const mark = target.soft !== undefined ? schema.columns.findIndex((c) => c.name === target.soft!.column) : -1;
  const now = new Date().toISOString().replace('Z', '000Z');
  const deletes = mark < 0 ? extraKeys : [];
  const patches = mark < 0 ? [] : extraKeys.map((key) => ({ key, columns: [mark], values: [now] }));

  const runId = newRunId();
  const startedAt = new Date().toISOString();
  const prior = context.state.streams[target.stream.name];
  const next: PipelineState = {
    ...context.state,
    version: context.state.version + 1,
    streams: { ...context.state.streams, [target.stream.name]: { ...prior!, updatedAt: finishedAt(startedAt), ...runMarks(prior, runId, startedAt) } },
  };
  const txn = await context.destination.begin({ pipeline: context.pipeline, runId, target: { schema, write: 'merge' }, fence: { pipeline: context.pipeline, token: context.lease.token } });
  try {
    await context.lease.assertHeld();
    await txn.commit({
      state: next,
      run: runRecordFor({ runId, pipeline: context.pipeline, startedAt }, target.stream.name, 'committed', {
        rowsRead: upserts.length,
        rowsLoaded: upserts.length + extraKeys.length,
        rowsRejected: 0,
        commits: 1,
        cursorMin: null,
        cursorMax: null,
        full: false,
      }),
      rejects: [],
      swap: false,
      changes: [{ target: { schema, write: 'merge' }, changes: { deletes, upserts, patches } }],
      verify: () => context.lease.assertHeld(),
    });
  } catch (error) {
    await txn.rollback().catch(() => undefined);
    throw error;
  }
  return { repair: { upserted: upserts.length, deleted: extraKeys.length }, state: next };
}

/** A canonical text (as the verify SQL prints it) back to tidemark's in-memory value of the column's type. */
export function valueOf(column: Column, text: string | null): Value {
  if (text === null) return null;
  return valueOfType(column.type, text);
}

function valueOfType(type: ColumnType, text: string): Value {
  switch (type.kind) {
    case 'boolean':
      return text === 't';
    case 'int16':
    case 'int32':
      return Number(text);
    case 'int64':
    case 'uint64':
      return BigInt(text);
    case 'float32':
    case 'float64':
      return text === '-0' ? -0 : Number(text);
    case 'bytes':
      return new Uint8Array(Buffer.from(text, 'hex'));
    default:
      return text;
  }
}
