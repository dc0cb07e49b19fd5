/**
 * A destination whose load commits are timed and counted for a run observer: one wrapper around `begin`, so the
 * three loaders (stream, partition, log) report commits alike without knowing about telemetry.
 */
import { stat } from 'node:fs/promises';
import type { BulkChunk, BulkFormat, CommitRequest, Destination, LoadTransaction } from '../core/connector.js';
import type { Column, ColumnType } from '../core/types.js';
import type { RunObserver } from '../core/run-observer.js';
import { monotonicMs } from '../core/run-clock.js';

/**
 * A plain object delegating each member of the interface, not a Proxy: the loaders call `rejectReason` per value, and
 * a proxy's trap on that path made a load with telemetry on measurably slower. Optional members stay absent when the
 * destination has none (their absence means something, e.g. no `widens`: no column type ever changes).
 */
export function observedDestination(destination: Destination, observer: RunObserver): Destination {
  const d = destination;
  return {
    capabilities: d.capabilities,
    state: d.state,
    ...(d.ledger !== undefined ? { ledger: d.ledger } : {}),
    begin: async (load) => observedTransaction(await d.begin(load), observer),
    rejectReason: (type, value) => d.rejectReason(type, value),
    ...(d.mayReject ? { mayReject: (type: ColumnType) => d.mayReject!(type) } : {}),
    ...(d.widens ? { widens: (from: ColumnType, to: ColumnType) => d.widens!(from, to) } : {}),
    ...(d.acceptsBulk ? { acceptsBulk: (format: BulkFormat, columns: readonly Column[]) => d.acceptsBulk!(format, columns) } : {}),
    dropBuild: (stream) => d.dropBuild(stream),
    ...(d.fenceToken ? { fenceToken: (lease: string) => d.fenceToken!(lease) } : {}),
    close: () => d.close(),
  };
}

/** A transaction member bound to it once (writes are called per batch). */
const bound = new WeakMap<object, Map<PropertyKey, unknown>>();
function boundMember(target: object, property: PropertyKey): unknown {
  const value: unknown = Reflect.get(target, property, target);
  if (typeof value !== 'function') return value;
  let members = bound.get(target);
  if (members === undefined) bound.set(target, (members = new Map()));
  let member = members.get(property);
  if (member === undefined) members.set(property, (member = (value as (...args: unknown[]) => unknown).bind(target)));
  return member;
}

function observedTransaction(txn: LoadTransaction, observer: RunObserver): LoadTransaction {
  let bytes = 0;
  const writeBulk = txn.writeBulk;
  return new Proxy(txn, {
    get(target, property) {
      if (property === 'writeBulk' && writeBulk !== undefined) {
        return async (chunk: BulkChunk) => {
          // Sized before the write: the destination may delete the chunk's file once read.
          bytes += await stat(chunk.path).then((s) => s.size, () => 0);
          return writeBulk.call(target, chunk);
        };
      }
      if (property === 'commit') {
        return async (request: CommitRequest) => {
          const startedAtMs = Date.now();
          const started = monotonicMs();
          await target.commit(request);
          observer.committed({
            stream: request.run.stream,
            rowsRead: request.run.rowsRead,
            rowsLoaded: request.run.rowsLoaded,
            rowsRejected: request.run.rowsRejected,
            // A partition's ledger row knows its files' size; other loads count the bulk chunks they staged.
            bytes: request.ledger?.length ? request.ledger.reduce((n, e) => n + e.bytes, 0) : bytes,
            partitions: (request.ledger ?? []).map((e) => e.partition),
            startedAtMs,
            durationMs: monotonicMs() - started,
          });
          bytes = 0;
        };
      }
      return boundMember(target, property);
    },
  });
}
