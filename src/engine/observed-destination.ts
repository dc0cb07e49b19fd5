/**
 * A destination whose load commits are timed and counted for a run observer: one wrapper around `begin`, so the
 * three loaders (stream, partition, log) report commits alike without knowing about telemetry.
 */
import { stat } from 'node:fs/promises';
import type { BulkChunk, CommitRequest, Destination, LoadTransaction } from '../core/connector.js';
import type { RunObserver } from '../core/run-observer.js';
import { monotonicMs } from '../core/run-clock.js';

export function observedDestination(destination: Destination, observer: RunObserver): Destination {
  const begin = async (...args: Parameters<Destination['begin']>) => observedTransaction(await destination.begin(...args), observer);
  return new Proxy(destination, { get: (target, property) => (property === 'begin' ? begin : boundMember(target, property)) });
}

/**
 * A member of the wrapped object, its methods bound to it once: the loaders call some of them per value
 * (`rejectReason`), and a new bound function per call made a 1M-row load with telemetry on markedly slower.
 */
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
