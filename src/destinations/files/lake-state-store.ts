/**
 * The state store and ledger "in the destination" of a lake: both read the committed manifest, and every change
 * is a commit of its own (a new manifest, then `state.json`), never an edit in place.
 */
import type { LedgerStore, SaveMeta, StateStore } from '../../core/connector.js';
import { ConflictError } from '../../core/errors.js';
import type { PartitionChecksum, PipelineState, PipelineStateVersion, RejectRecord, RunRecord } from '../../core/types.js';
import { newRunId } from '../../core/ids.js';
import { checkName, keys, withoutFailures } from './lake-layout.js';
import type { Lake } from './lake.js';

export type { RejectRecord };

export class LakeStateStore implements StateStore {
  constructor(
    private readonly lake: Lake,
    private readonly onClose: () => Promise<void>,
    /** Garbage collection of what killed runs left; called when a run starts (under its lease). */
    private readonly collect: (pipeline: string) => Promise<void>,
  ) {}

  async load(pipeline: string): Promise<PipelineState | undefined> {
    return (await this.lake.head(checkName('pipeline', pipeline))).manifest.state ?? undefined;
  }

  async save(next: PipelineState, expectedVersion: number | undefined, meta: SaveMeta): Promise<void> {
    const pipeline = checkName('pipeline', next.pipeline);
    await this.lake.commit(pipeline, { state: next, stateChanged: true }, {
      loadId: `state-${newRunId()}`,
      runId: meta.runId,
      reason: meta.reason,
      check: (head) => {
        const stored = head.manifest.state?.version;
        if (stored !== expectedVersion) {
          throw new ConflictError(`state of pipeline ${pipeline} moved (expected version ${expectedVersion ?? 'none'}, found ${stored ?? 'none'})`, {
            context: { pipeline, phase: 'state' },
          });
        }
      },
    });
  }

  async history(pipeline: string): Promise<readonly PipelineStateVersion[]> {
    const out: PipelineStateVersion[] = [];
    for (const m of await this.lake.chain(checkName('pipeline', pipeline))) {
      if (!m.stateChanged || m.state === null) continue;
      out.push({ version: m.state.version, savedAt: m.committedAt, runId: m.runId, reason: m.reason, state: m.state });
    }
    return out;
  }

  /** Run records of commits, overridden by failures recorded outside a commit (`_tidemark/runs/`). */
  async runs(pipeline: string, limit: number): Promise<readonly RunRecord[]> {
    const head = await this.lake.head(checkName('pipeline', pipeline));
    const byKey = new Map<string, RunRecord>();
    for (const r of head.manifest.runs) byKey.set(`${r.runId}\u0000${r.stream}`, r);
    for (const r of await this.failures(pipeline)) byKey.set(`${r.runId}\u0000${r.stream}`, r);
    return [...byKey.values()].sort((a, b) => (a.runId === b.runId ? a.stream.localeCompare(b.stream) : a.runId < b.runId ? 1 : -1)).slice(0, limit);
  }

  private async failures(pipeline: string): Promise<RunRecord[]> {
    const out: RunRecord[] = [];
    for await (const info of this.lake.store.list(keys.runsDir(pipeline))) {
      const got = await this.lake.store.get(info.key);
      if (!got) continue;
      try {
        out.push(JSON.parse(Buffer.from(got.body).toString('utf8')) as RunRecord);
      } catch {
        // A torn failure record says nothing the commits do not.
      }
    }
    return out;
  }

  async closeInterruptedRuns(pipeline: string): Promise<void> {
    await this.collect(checkName('pipeline', pipeline));
    const head = await this.lake.head(pipeline);
    const recorded = new Set((await this.failures(pipeline)).map((r) => `${r.runId}\u0000${r.stream}`));
    for (const r of head.manifest.runs) {
      if (r.outcome !== 'running' || recorded.has(`${r.runId}\u0000${r.stream}`)) continue;
      await this.recordFailure({ ...r, outcome: 'failed', error: 'interrupted: the run stopped before its last commit' });
    }
  }

  async recordFailure(run: RunRecord): Promise<void> {
    await this.lake.store.put(keys.run(checkName('pipeline', run.pipeline), run.runId.replace(/[^A-Za-z0-9_.-]/g, '_'), checkName('stream', run.stream)), JSON.stringify(run));
  }

  async rejects(pipeline: string, limit: number, stream?: string): Promise<readonly RejectRecord[]> {
    const head = await this.lake.head(checkName('pipeline', pipeline));
    // Keys are `<stream>` or `<stream>#<partition>`.
    const lists = Object.entries(head.manifest.rejects).filter(([key]) => stream === undefined || key.split('#')[0] === stream);
    const files = lists.flatMap(([, list]) => list).sort().reverse();
    const out: RejectRecord[] = [];
    for (const key of files) {
      const got = await this.lake.store.get(key);
      if (!got) continue;
      const lines = Buffer.from(got.body).toString('utf8').split('\n').filter(Boolean).reverse();
      for (const line of lines) {
        const r = JSON.parse(line) as RejectRecord;
        out.push({
          runId: r.runId,
          stream: r.stream,
          column: r.column,
          reason: r.reason,
          row: r.row,
          ...(r.partition !== undefined ? { partition: r.partition } : {}),
          ...(r.rejectedAt !== undefined ? { rejectedAt: r.rejectedAt } : {}),
        });
        if (out.length >= limit) return out;
      }
    }
    return out;
  }

  close(): Promise<void> {
    return this.onClose();
  }
}

/** The partition ledger, kept in the manifest; `forget` is a commit of its own. */
export function lakeLedger(lake: Lake, knownPipelines: () => Promise<readonly string[]>): LedgerStore {
  return {
    async list(pipeline, stream) {
      const head = await lake.head(checkName('pipeline', pipeline));
      return head.manifest.ledger
        .filter((e) => stream === undefined || e.stream === stream)
        .sort((a, b) => (a.stream === b.stream ? (a.partition < b.partition ? -1 : a.partition > b.partition ? 1 : 0) : a.stream < b.stream ? -1 : 1));
    },
    async forget(pipeline, stream, partitions) {
      const head = await lake.head(checkName('pipeline', pipeline));
      const drop = new Set(partitions);
      const named = (e: { stream: string; partition: string }) => e.stream === stream && drop.has(e.partition);
      const failures = head.manifest.failures ?? [];
      const removed = new Set([...head.manifest.ledger, ...failures].filter(named).map((e) => e.partition)).size;
      if (removed === 0) return 0;
      const change = {
        ledger: head.manifest.ledger.filter((e) => !named(e)),
        failures: failures.filter((f) => !named(f)),
        // A forgotten partition's next load stores a checksum of its own; none is left behind meanwhile.
        ...(head.manifest.checksums !== undefined ? { checksums: head.manifest.checksums.filter((c) => !named(c)) } : {}),
        stateChanged: false,
      };
      await lake.commit(pipeline, change, {
        loadId: `ledger-${newRunId()}`,
        runId: null,
        reason: `ledger forget ${stream}: ${partitions.join(', ')}`,
        check: (now) => {
          if (now.manifest.commit !== head.manifest.commit) throw new ConflictError(`the lake of pipeline ${pipeline} changed while the ledger was edited; try again`);
        },
      });
      return removed;
    },
    async recordFailure(failure) {
      const pipeline = checkName('pipeline', failure.pipeline);
      // A commit of its own, beside the load commits (it changes no state version); it replaces the partition's last failure.
      await lake.commit(pipeline, (head) => ({ failures: [...withoutFailures(head.manifest.failures ?? [], [failure]), failure], stateChanged: false }), {
        loadId: `failure-${newRunId()}`,
        runId: failure.runId,
        reason: `load of partition ${failure.partition} of ${failure.stream} failed`,
      });
    },
    async failures(pipeline, stream) {
      const head = await lake.head(checkName('pipeline', pipeline));
      return (head.manifest.failures ?? []).filter((f) => stream === undefined || f.stream === stream);
    },
    async checksums(pipeline, stream) {
      const head = await lake.head(checkName('pipeline', pipeline));
      const out = new Map<string, PartitionChecksum>();
      for (const { stream: of, ...c } of head.manifest.checksums ?? []) if (of === stream) out.set(c.partition, c);
      return out;
    },
    async countRows(table, column) {
      const counts = new Map<string, number>();
      for (const pipeline of await knownPipelines()) {
        const files = (await lake.head(pipeline)).manifest.tables[table]?.files;
        if (files === undefined) continue;
        for (const f of files) {
          if (f.partition?.column !== column) continue;
          counts.set(f.partition.value, (counts.get(f.partition.value) ?? 0) + f.rows);
        }
        break;
      }
      return counts;
    },
  };
}
