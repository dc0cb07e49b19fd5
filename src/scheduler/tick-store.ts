/**
 * The last tick the scheduler took per pipeline, kept in a small JSON file beside the pipelines, so a restarted
 * scheduler knows which ticks it missed while it was down (`catch_up`). Written by rename, never half-written.
 */
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { StateError } from '../core/errors.js';
import { randomHex } from '../core/ids.js';

interface TickFile {
  readonly version: 1;
  readonly pipelines: Readonly<Record<string, { readonly last_tick: string }>>;
}

export const TICK_FILE_NAME = '.tidemark-schedule.json';

export class TickStore {
  private ticks = new Map<string, Date>();
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
      }
    } catch (cause) {
      throw new StateError(`the schedule file ${path} is not valid JSON (delete it to start afresh): ${(cause as Error).message}`, { cause });
    }
    return store;
  }

  lastTick(pipeline: string): Date | undefined {
    return this.ticks.get(pipeline);
  }

  /** Records a tick; writes are serialised so the file always holds the latest map. */
  record(pipeline: string, tick: Date): Promise<void> {
    this.ticks.set(pipeline, tick);
    const doc: TickFile = {
      version: 1,
      pipelines: Object.fromEntries([...this.ticks].map(([name, at]) => [name, { last_tick: at.toISOString() }])),
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
