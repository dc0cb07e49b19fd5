/**
 * One run of an Airbyte connector (`spec`, `check`, `discover` or `read`) as a child process: its files in a private
 * temp directory (0600, removed when it exits), its stdout parsed line by line into messages, its stderr kept as a
 * tail for errors, and a silence limit, so a connector that never ends is stopped with a clear error.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SourceError } from '../../core/errors.js';
import { redact } from '../../core/logger.js';
import { ownedTempDir, removeOrphanTempDirs } from '../../shared/process.js';
import { readLines } from '../singer/singer-messages.js';
import { exitOf, Tail, type Exit } from '../singer/singer-source.js';
import { parseAirbyteMessage, type AirbyteMessage } from './airbyte-messages.js';

export interface ConnectorRunOptions {
  readonly command: readonly string[];
  /** The connector's name in messages. */
  readonly name: string;
  readonly verb: 'spec' | 'check' | 'discover' | 'read';
  /** Files written into the temp directory and passed as `--<name> <file>` (config, catalog, state). */
  readonly files: readonly { readonly flag: string; readonly text: string }[];
  readonly env?: Readonly<Record<string, string>>;
  /** Longest silence on stdout before the connector is stopped (ms). */
  readonly idleMs: number;
  readonly signal?: AbortSignal;
}

const PREFIX = 'tidemark-airbyte-';

function exitHow(exit: Exit): string {
  if (exit.error) return `could not be started (${(exit.error as NodeJS.ErrnoException).code ?? exit.error.message})`;
  return exit.signal !== null ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
}
export class ConnectorRun {
  private stopped = false;
  private cleaned: Promise<void> | undefined;

  private constructor(
    private readonly child: ChildProcess,
    private readonly dir: string,
    private readonly options: ConnectorRunOptions,
    private readonly exited: Promise<Exit>,
    private readonly stderr: Tail,
  ) {
    void exited.then(
      () => this.cleanup(),
      () => this.cleanup(),
    );
  }

  static async start(options: ConnectorRunOptions): Promise<ConnectorRun> {
    // A later run removes what a killed one (kill -9) could not: the config file too.
    await removeOrphanTempDirs(PREFIX);
    const dir = await ownedTempDir(PREFIX);
    let child: ChildProcess;
    try {
      const args = [...options.command.slice(1), options.verb];
      for (const file of options.files) {
        // Connectors built on CDKs that `require()` their inputs need the .json extension.
        const path = join(dir, `${file.flag}.json`);
        await writeFile(path, file.text, { mode: 0o600 });
        args.push(`--${file.flag}`, path);
      }
      child = spawn(options.command[0]!, args, {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, ...options.env },
        ...(options.signal ? { signal: options.signal } : {}),
      });
    } catch (error) {
      await rm(dir, { recursive: true, force: true });
      throw error;
    }
    const stderr = new Tail();
    child.stderr!.on('data', (d: Buffer) => stderr.push(d));
    return new ConnectorRun(child, dir, options, exitOf(child), stderr);
  }

  private get program(): string {
    return this.options.name;
  }

  /** Messages as they arrive; a connector silent for longer than `idleMs` is killed and reported. */
  async *messages(): AsyncGenerator<AirbyteMessage> {
    const what = `the connector ${this.program}`;
    const lines = readLines(this.child.stdout!, what)[Symbol.asyncIterator]();
    let lineNumber = 0;
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const silence = new Promise<'silent'>((resolve) => (timer = setTimeout(() => resolve('silent'), this.options.idleMs)));
      let next: IteratorResult<string> | 'silent';
      try {
        next = await Promise.race([lines.next(), silence]);
      } catch (error) {
        clearTimeout(timer);
        throw await this.explain(error);
      } finally {
        clearTimeout(timer);
      }
      if (next === 'silent') {
        await this.stop();
        throw this.failure(`sent nothing for ${Math.round(this.options.idleMs / 1000)}s and was stopped (source.idle_timeout)`, false);
      }
      if (next.done) return;
      lineNumber += 1;
      let message: AirbyteMessage | undefined;
      try {
        message = parseAirbyteMessage(next.value, what, lineNumber);
      } catch (error) {
        throw await this.explain(error);
      }
      if (message) yield message;
    }
  }

  /** Resolves when the connector exited cleanly; otherwise throws with its stderr tail. */
  async finished(): Promise<void> {
    const exit = await this.exited;
    if (exit.code !== 0 || exit.signal !== null) throw this.exitFailure(exit);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.child.stdout!.destroy();
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGTERM');
      await Promise.race([this.exited, new Promise((r) => setTimeout(r, 5000))]);
      if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    }
    await this.exited.catch(() => undefined);
    await this.cleanup();
  }

  /**
   * A broken line names itself (number and start); a connector that then died (it printed an error page and failed,
   * or died of EPIPE once nothing read it) is reported with its exit and stderr as well, never instead.
   */
  private async explain(error: unknown): Promise<unknown> {
    const exit = await Promise.race([this.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 2000))]);
    const line = error instanceof SourceError ? error.message.replace(`the connector ${this.program} `, '') : undefined;
    if (exit && (exit.code !== 0 || exit.signal !== null)) return line === undefined ? this.exitFailure(exit) : this.failure(`${line}; then it ${exitHow(exit)}`, false);
    await this.stop();
    return line === undefined ? error : this.failure(line, false);
  }

  private exitFailure(exit: Exit): SourceError {
    return this.failure(exitHow(exit), exit.signal !== null && !this.stopped);
  }

  failure(what: string, retryable: boolean): SourceError {
    const tail = this.stderr.lines();
    const shown = tail.length ? `; its stderr ended with:\n  ${tail.map((l) => redact(l)).join('\n  ')}` : '; it wrote nothing to stderr';
    return new SourceError(redact(`the connector ${this.program} ${this.options.verb} ${what}${shown}`), { context: { phase: 'extract' }, retryable });
  }

  private cleanup(): Promise<void> {
    return (this.cleaned ??= rm(this.dir, { recursive: true, force: true }));
  }
}
