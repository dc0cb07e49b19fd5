/**
 * Failpoints for crash tests: `TIDEMARK_FAILPOINTS="load.before_commit=3:kill,extract.after_batch=1:throw"` fires
 * the action on the Nth time the point is reached. When the variable is unset, `failpoint()` is a constant no-op.
 */
export type FailpointName =
  | 'extract.after_batch'
  | 'load.after_write'
  | 'load.before_commit'
  | 'load.after_commit'
  | 'lock.after_acquire'
  /** A ranged load (`parallel:`): a chunk of a range is staged, the range is not committed. */
  | 'range.after_write'
  /** A ranged load: a range, its ledger row and the state are committed; the next range is not. */
  | 'range.after_commit'
  /** After a data commit, before the same state is saved to a separate state store. */
  | 'state.before_store_save'
  /** A widened column was converted (ALTER) inside the load's open transaction, before its rows land and commit. */
  | 'schema.after_widen'
  /** `lake compact`: the rewritten objects are uploaded, no manifest names them yet. */
  | 'compact.after_write'
  /** `lake compact`: the new manifest is uploaded, right before `state.json` (the commit point) is written. */
  | 'compact.before_commit'
  /** `lake compact`: committed, before old manifests are pruned. */
  | 'compact.after_commit'
  /** `strategy: log`: a source transaction was added to the pending changes (not committed yet). */
  | 'cdc.after_apply'
  /** `strategy: log`: the changes and their position are committed; the source has not been told yet. */
  | 'cdc.before_ack';

type Action = 'kill' | 'throw' | 'hang' | 'sleep';

interface Armed {
  readonly at: number;
  readonly action: Action;
  readonly sleepMs: number;
  hits: number;
}

export class FailpointError extends Error {}

function parse(spec: string | undefined): Map<string, Armed> {
  const armed = new Map<string, Armed>();
  for (const part of (spec ?? '').split(',').map((p) => p.trim()).filter(Boolean)) {
    const m = /^([a-z_.]+)=(\d+):(kill|throw|hang|sleep\((\d+)\))$/.exec(part);
    if (!m) throw new Error(`TIDEMARK_FAILPOINTS: cannot parse "${part}" (expected name=N:kill|throw|hang|sleep(ms))`);
    const action = (m[3]!.startsWith('sleep') ? 'sleep' : m[3]) as Action;
    armed.set(m[1]!, { at: Number(m[2]), action, sleepMs: Number(m[4] ?? 0), hits: 0 });
  }
  return armed;
}

let armed: Map<string, Armed> | undefined;

export function resetFailpoints(spec: string | undefined = process.env.TIDEMARK_FAILPOINTS): void {
  armed = parse(spec);
}

export async function failpoint(name: FailpointName): Promise<void> {
  if (armed === undefined) resetFailpoints();
  if (armed!.size === 0) return;
  const point = armed!.get(name);
  if (!point) return;
  point.hits += 1;
  if (point.hits !== point.at) return;
  switch (point.action) {
    case 'kill':
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => setInterval(() => undefined, 60_000));
      return;
    case 'throw':
      throw new FailpointError(`failpoint ${name} fired (hit ${point.hits})`);
    case 'hang':
      // A referenced timer keeps the process alive, as a stuck run would be.
      await new Promise(() => setInterval(() => undefined, 60_000));
      return;
    case 'sleep':
      await new Promise((resolve) => setTimeout(resolve, point.sleepMs));
  }
}
