/**
 * The last tick the scheduler took per pipeline, kept in a small JSON file beside the pipelines, so a restarted
 * scheduler knows which ticks it missed while it was down (`catch_up`). Written by rename, never half-written.
 */
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { StateError } from '../core/errors.js';
import { randomHex } from '../core/ids.js';

/** A tick whose run failed and is to be run again (`retry:`): which tick, how often it failed, when next. */
export interface PendingRetry {
  readonly tick: Date;
  readonly failures: number;
  readonly due: Date;
}

interface TickFile {
  readonly version: 1;
  readonly pipelines: Readonly<Record<string, { readonly last_tick: string; readonly retry?: { readonly tick: string; readonly failures: number; readonly due: string } }>>;
}

export const TICK_FILE_NAME = '.tidemark-schedule.json';

export class TickStore {
  private ticks = new Map<string, Date>();
  private retries = new Map<string, PendingRetry>();
  private writing: Promise<void> = Promise.resolve();

  private constructor(readonly path: string) {}

  static async open(path: string): Promise<TickStore> {
    const store = new TickStore(path);
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return store;
      throw new StateError(`cannot read the schedule file ${path}: ${(error as Error).message}`, { cause: error });
    }
    try {
      const doc = JSON.parse(text) as TickFile;
      for (const [name, entry] of Object.entries(doc.pipelines ?? {})) {
        const at = new Date(entry.last_tick);
        if (!Number.isNaN(at.getTime())) store.ticks.set(name, at);
        const retry = entry.retry;
        if (retry !== undefined) store.retries.set(name, { tick: new Date(retry.tick), failures: retry.failures, due: new Date(retry.due) });
      }
    } catch (cause) {
      throw new StateError(`the schedule file ${path} is not valid JSON (delete it to start afresh): ${(cause as Error).message}`, { cause });
    }
    return store;
  }

  lastTick(pipeline: string): Date | undefined {
    return this.ticks.get(pipeline);
  }

  /** The failed tick of a pipeline still to be retried, if any (kept across processes, so `--once` retries too). */
  pendingRetry(pipeline: string): PendingRetry | undefined {
    return this.retries.get(pipeline);
  }

  /** Records a tick; writes are serialised so the file always holds the latest map. */
  record(pipeline: string, tick: Date): Promise<void> {
    this.ticks.set(pipeline, tick);
    return this.write();
  }

  /** Sets (or with undefined, clears) the pipeline's pending retry. */
  setRetry(pipeline: string, retry: PendingRetry | undefined): Promise<void> {
    if (retry === undefined) this.retries.delete(pipeline);
    else this.retries.set(pipeline, retry);
    return this.write();
  }

  private write(): Promise<void> {
    const retryOf = (name: string) => {
      const r = this.retries.get(name);
      return r === undefined ? {} : { retry: { tick: r.tick.toISOString(), failures: r.failures, due: r.due.toISOString() } };
    };
    const doc: TickFile = {
      version: 1,
      pipelines: Object.fromEntries([...this.ticks].map(([name, at]) => [name, { last_tick: at.toISOString(), ...retryOf(name) }])),
    };
    const write = this.writing.then(async () => {
      await mkdir(dirname(this.path), { recursive: true });
      const tmp = join(dirname(this.path), `.tmp-${randomHex(6)}`);
      await writeFile(tmp, `${JSON.stringify(doc, null, 2)}\n`);
      await rename(tmp, this.path);
    });
    // One failed write must not block every later one.
    this.writing = write.catch(() => undefined);
    return write;
  }
}
