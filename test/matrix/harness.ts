/**
 * Runs one cell of the matrix through the real CLI: a pipeline file in the cell's directory, the fault applied,
 * every run's result and state checked as it happens, and the oracle after the final run.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { cli, type CliResult } from '../helpers/cli.js';
import { STREAM, type Canonical } from './fixture.js';
import {
  checkCursorWatermark,
  checkLedger,
  checkNeverBack,
  checkRangeLedger,
  checkRangesUnderWay,
  checkNotAhead,
  checkRows,
  checkRunJson,
  checkRunRecords,
  checkWatermark,
  OracleError,
  watermarkOf,
  type LedgerRowJson,
  type RangedStateJson,
  type RunJson,
  type RunRecordJson,
  type Watermark,
} from './oracle.js';
import type { CellContext, CellSpec, DestinationAdapter, DestinationInstance, Failpoint, SourceAdapter, SourceInstance } from './types.js';

export interface CellOutcome {
  readonly status: 'passed' | 'refused';
  /** A failpoint armed for this cell that never fired on its path. */
  readonly notFired?: Failpoint;
  readonly runs: number;
}

/** Where a cell's wall time went, by part (for the log: the matrix's cost is spent where these say). */
export class Profile {
  private readonly parts = new Map<string, { ms: number; n: number }>();

  async time<T>(part: string, work: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    try {
      return await work();
    } finally {
      const p = this.parts.get(part) ?? { ms: 0, n: 0 };
      p.ms += performance.now() - t0;
      p.n += 1;
      this.parts.set(part, p);
    }
  }

  toString(): string {
    return [...this.parts].map(([part, { ms, n }]) => `${part} ${n > 1 ? `${n}× ` : ''}${(ms / 1000).toFixed(1)}s`).join(' · ');
  }
}

interface Run extends CliResult {
  readonly json: RunJson | undefined;
}

class Cell {
  private readonly history: (Watermark | undefined)[] = [];
  /** The destination's rows as read after run `runs` (nothing but a run changes them). */
  private readBack: { runs: number; rows: Canonical[] } | undefined;
  runs = 0;
  constructor(
    private readonly spec: CellSpec,
    private readonly pipeline: string,
    private readonly config: string,
    private readonly source: SourceInstance,
    private readonly destination: DestinationInstance,
    private readonly profile: Profile,
  ) {}

  private env(extra: Record<string, string> = {}): Record<string, string> {
    return { TIDEMARK_CONFIG_CACHE: 'off', ...this.source.env, ...this.destination.env, ...extra };
  }

  async tm(args: readonly string[]): Promise<CliResult> {
    return this.profile.time('cli', () => cli(args, { env: this.env() }));
  }

  /** One `run --json`; the run's own result and the state it left are checked at once. */
  async run(failpoints?: string, extra: readonly string[] = []): Promise<Run> {
    this.runs += 1;
    await this.destination.beforeRun?.(this.pipeline);
    const out = await this.profile.time('run', () => cli(['run', this.config, '--json', ...extra], { env: this.env(failpoints ? { TIDEMARK_FAILPOINTS: failpoints } : {}) }));
    let json: RunJson | undefined;
    try {
      json = out.stdout.trim() ? (JSON.parse(out.stdout) as RunJson) : undefined;
    } catch {
      json = undefined;
    }
    if (out.signal !== 'SIGKILL') checkRunJson(out.code, json);
    // A finished run reports the watermark it left; a killed one is asked for its state.
    const reported = json?.streams.find((s) => s.stream === STREAM);
    const tuple = this.tracksWatermark;
    this.history.push(!tuple ? undefined : reported && out.code === 0 ? watermarkOf({ streams: { [STREAM]: reported } }, STREAM) : await this.watermark());
    checkNeverBack(this.history);
    return { ...out, json };
  }

  async ok(failpoints?: string, extra: readonly string[] = []): Promise<Run> {
    const r = await this.run(failpoints, extra);
    if (r.code !== 0) throw new OracleError(`run ${this.runs} exit ${r.code} ${r.signal ?? ''}: ${r.stderr.trim().split('\n').slice(-4).join(' | ')}`);
    return r;
  }

  async state(): Promise<unknown> {
    const out = await this.tm(['state', 'show', '--json', '--config', this.config]);
    if (out.code !== 0) return undefined;
    try {
      return JSON.parse(out.stdout);
    } catch {
      return undefined;
    }
  }

  /** The stream keeps a watermark the oracle follows: `(cursor, key)`, or a keyless stream's cursor. */
  private get tracksWatermark(): boolean {
    const rule = this.source.watermark(this.spec.write);
    return rule === 'tuple' || rule === 'cursor';
  }

  async watermark(): Promise<Watermark | undefined> {
    return this.tracksWatermark ? watermarkOf(await this.state(), STREAM) : undefined;
  }

  /** A ranged stream's ledger rows and the load under way its state names (none once a load is finished). */
  async ranges(): Promise<{ entries: LedgerRowJson[]; underWay: RangedStateJson | undefined }> {
    const out = await this.tm(['ledger', 'list', '--json', '--config', this.config]);
    if (out.code !== 0) throw new OracleError(`ledger list failed: ${out.stderr}`);
    const entries = (JSON.parse(out.stdout) as { partition: string; rows: number | string; status: string }[]).map((e) => ({ partition: e.partition, rows: Number(e.rows), status: e.status }));
    const state = (await this.state()) as { streams?: Record<string, { ranged?: RangedStateJson }> } | undefined;
    return { entries, underWay: state?.streams?.[STREAM]?.ranged };
  }

  async rows(): Promise<Canonical[]> {
    if (this.readBack?.runs !== this.runs) this.readBack = { runs: this.runs, rows: await this.profile.time('read back', () => this.destination.rows(this.pipeline, STREAM)) };
    return this.readBack.rows;
  }

  /** The watermark the last run left (a killed run's was read from its state). */
  get lastWatermark(): Watermark | undefined {
    return this.history.at(-1);
  }

  /** The whole oracle, after the cell's final run. */
  async oracle(): Promise<void> {
    const expected = this.source.expected(this.spec.write);
    checkRows(await this.rows(), expected, this.spec.write === 'append' ? 'version' : 'id');
    const rule = this.source.watermark(this.spec.write);
    // The final run reported the watermark it committed (or, killed, the state was read): no extra CLI call.
    if (rule === 'tuple') checkWatermark(this.history.at(-1), this.source.expected('merge'));
    if (rule === 'cursor') checkCursorWatermark(this.history.at(-1), this.source.expected('append'));
    const ranges = this.source.ranges;
    if (ranges !== undefined) {
      const { entries, underWay } = await this.ranges();
      // A full build's ranges hold the table; an incremental stream's are its first load's (later runs read above it).
      checkRangeLedger(entries, underWay, { minRanges: ranges.min, ...(ranges.rowsOver !== undefined ? { rowsOver: ranges.rowsOver } : {}), ...(this.spec.write === 'full' ? { rows: (await this.rows()).length } : {}) });
    }
    if (rule === 'ledger') {
      const out = await this.tm(['ledger', 'list', '--json', '--config', this.config]);
      if (out.code !== 0) throw new OracleError(`ledger list failed: ${out.stderr}`);
      const entries = (JSON.parse(out.stdout) as { partition: string; rows: number | string }[]).map((e) => ({ partition: e.partition, rows: Number(e.rows) }));
      checkLedger(entries, this.source.partitions!());
    }
    const records = await this.tm(['runs', '--json', '--limit', '1000', '--config', this.config]);
    if (records.code === 0) checkRunRecords(JSON.parse(records.stdout) as RunRecordJson[]);
    await this.profile.time('read back', () => this.destination.check(this.pipeline, STREAM, true));
  }

  /**
   * A run with nothing new loads nothing and changes nothing (a source may re-send its bookmark's records, as a
   * `>=` API or tap does: the engine drops them). A full stream reads and rebuilds everything every run.
   */
  async quietRun(): Promise<void> {
    // What the runs before it left must already be right: a full run rebuilds everything and would hide it.
    const before = await this.rows();
    checkRows(before, this.source.expected(this.spec.write), this.spec.write === 'append' ? 'version' : 'id');
    const r = await this.ok();
    const loaded = r.json?.streams.reduce((n, s) => n + s.rows_loaded, 0);
    const read = r.json?.streams.reduce((n, s) => n + s.rows_read, 0);
    if (this.spec.write !== 'full' && loaded !== 0) throw new OracleError(`a run with nothing new loaded ${loaded} rows (read ${read})`);
    checkRows(await this.rows(), before, this.spec.write === 'append' ? 'version' : 'id');
  }
}

export async function runCell(spec: CellSpec, sourceAdapter: SourceAdapter, destinationAdapter: DestinationAdapter, ctx: CellContext, profile = new Profile()): Promise<CellOutcome> {
  const verdicts = [sourceAdapter.validate(spec), destinationAdapter.validate(spec)];
  const invalid = verdicts.find((v) => v !== undefined && 'skip' in v);
  if (invalid && 'skip' in invalid) throw new Error(`cell ${spec.source}/${spec.destination} is not valid: ${invalid.skip}`);
  // Refused by the source, the destination or both: either refusal may be the one tidemark names first.
  const refusals = verdicts.filter((v): v is { refuse: RegExp; why: string } => v !== undefined && 'refuse' in v);
  const source = await profile.time('source setup', () => sourceAdapter.setup(ctx));
  const destination = await profile.time('destination setup', () => destinationAdapter.setup(ctx)).catch(async (e: unknown) => {
    await source.cleanup();
    throw e;
  });
  try {
    const name = `p_${spec.source.replace(/[^a-z0-9]/gi, '_')}`;
    const config = join(ctx.dir, 'pipeline.yaml');
    await writeFile(config, `name: ${name}\n${source.yaml(spec.write)}\n${destination.yaml}\n`);
    const cell = new Cell(spec, name, config, source, destination, profile);
    if (refusals.length > 0) {
      const r = await cell.run();
      if (r.code === 0) throw new OracleError(`expected a refusal (${refusals.map((v) => v.why).join('; or ')}), got exit 0`);
      if (!refusals.some((v) => v.refuse.test(r.stderr))) throw new OracleError(`refusal message ${JSON.stringify(r.stderr.trim())} does not match ${refusals.map((v) => v.refuse).join(' or ')}`);
      const rows = await cell.rows();
      if (rows.length > 0) throw new OracleError(`a refused pipeline loaded ${rows.length} rows`);
      return { status: 'refused', runs: cell.runs };
    }
    const notFired = await applyFault(spec, cell, timedSource(source, profile));
    await cell.oracle();
    return { status: 'passed', runs: cell.runs, ...(notFired ? { notFired } : {}) };
  } finally {
    await profile.time('cleanup', async () => {
      await destination.cleanup().catch(() => undefined);
      await source.cleanup().catch(() => undefined);
    });
  }
}

/** The source with its changes (the fault's writes) timed. */
function timedSource(source: SourceInstance, profile: Profile): SourceInstance {
  const timed = (work: () => Promise<void>) => () => profile.time('source writes', work);
  return {
    ...source,
    change: timed(() => source.change()),
    grow: timed(() => source.grow()),
    repair: timed(() => source.repair()),
    breakDeep: () => profile.time('source writes', () => source.breakDeep()),
  };
}

/** The cell's runs under its fault; returns the failpoint when it never fired on this path. */
async function applyFault(spec: CellSpec, cell: Cell, source: SourceInstance): Promise<Failpoint | undefined> {
  const fault = spec.fault;
  switch (fault.kind) {
    case 'none':
      await cell.ok();
      return undefined;
    case 'rerun':
      await cell.ok();
      await cell.quietRun();
      await cell.quietRun();
      return undefined;
    case 'full-then-run':
      await cell.ok();
      await cell.ok(undefined, ['--full']);
      await cell.quietRun();
      return undefined;
    case 'change':
      await cell.ok();
      await source.change();
      await cell.ok();
      // Versions written while the window was read that an unsorted listing had already passed are the next
      // window's: one more run takes them, then nothing is new.
      await cell.ok();
      await cell.quietRun();
      return undefined;
    case 'bad': {
      const outcome = await source.breakDeep();
      const r = await cell.run();
      if (outcome.kind === 'fail') {
        if (r.code === 0) throw new OracleError(`a bad value deep in the stream ended in exit 0 (${r.json?.streams.map((s) => `${s.rows_read} read, ${s.rows_loaded} loaded`).join('; ')})`);
        if (!outcome.message.test(r.stderr)) throw new OracleError(`error ${JSON.stringify(r.stderr.trim().slice(-400))} does not match ${outcome.message}`);
      } else {
        if (r.code !== 0) throw new OracleError(`a rejected row failed the run: ${r.stderr.trim().slice(-300)}`);
        const rejected = r.json?.streams.reduce((n, s) => n + s.rows_rejected, 0);
        if (rejected !== outcome.rows) throw new OracleError(`rows_rejected ${rejected}, expected ${outcome.rows}`);
      }
      checkRows(await cell.rows(), source.expectedAfterBad(spec.write), spec.write === 'append' ? 'version' : 'id');
      await source.repair();
      await cell.ok();
      return undefined;
    }
    case 'kill-change': {
      // Killed after a second range committed, the table changed, then resumed in another snapshot (docs/ranges.md, Resume).
      let fired = await killedRun(cell, source, 'range.after_commit=2:kill');
      if (!fired) {
        await source.grow();
        fired = await killedRun(cell, source, 'range.after_commit=1:kill');
      }
      const held = await cell.rows();
      await source.change();
      if (spec.write === 'append') source.forgetUnread?.(held);
      await cell.ok();
      // Versions the resumed load's bound left out (the change's cursor is newer) come with the next run.
      await cell.ok();
      await cell.quietRun();
      return fired ? undefined : 'range.after_commit';
    }
    case 'kill': {
      // The 2nd hit lands after a first commit (a resume), the 1st where a point fires once per run.
      const firstHit = fault.point === 'lock.after_acquire' ? 1 : 2;
      let fired = await killedRun(cell, source, `${fault.point}=${firstHit}:kill`);
      if (!fired) {
        await source.grow();
        fired = await killedRun(cell, source, `${fault.point}=1:kill`);
      }
      if (fired) await cell.ok();
      await cell.quietRun();
      return fired ? undefined : fault.point;
    }
  }
}

/** A run killed at a failpoint; after it, state must not be ahead of the data. False when the point never fired. */
async function killedRun(cell: Cell, source: SourceInstance, failpoints: string): Promise<boolean> {
  const r = await cell.run(failpoints);
  if (r.signal !== 'SIGKILL') {
    if (r.code !== 0) throw new OracleError(`run with ${failpoints} exit ${r.code}: ${r.stderr.trim().slice(-300)}`);
    return false;
  }
  checkNotAhead(cell.lastWatermark, source.expected('append'), await cell.rows());
  if (source.ranges !== undefined) {
    const { entries, underWay } = await cell.ranges();
    checkRangesUnderWay(entries, underWay);
  }
  return true;
}
