import { readFile } from 'node:fs/promises';
import {
  UsageError,
  bucketAccessOf,
  schemaVersions,
  deleteStoredPipeline,
  listStoredPipelines,
  loadPipelineOrTarget,
  parseStateSpec,
  stateCommands,
  isSyncPosition,
  storedPipeline,
  type PipelineState,
  type StoredPipeline,
  type StreamState,
} from '../../index.js';
import { print, printError, toJson } from '../output.js';
import { confirm } from '../prompt.js';
import { describeWatermark } from './run.js';

function showState(state: PipelineState): void {
  print(`pipeline ${state.pipeline}, state version ${state.version}`);
  for (const [name, s] of Object.entries(state.streams)) {
    const pending = s.build !== undefined && s.build.rows === 0 && s.build.watermark === undefined && s.build.afterPk === undefined;
    const build = s.build
      ? pending
        ? `, rebuild pending: the next run builds generation ${s.build.generation} beside the live table and swaps it in`
        : `, building generation ${s.build.generation} (${s.build.rows} rows so far)`
      : '';
    const sync = isSyncPosition(s.resume) ? `, sync token ${s.resume.sync === null ? '(none: the next run syncs everything)' : JSON.stringify(s.resume.sync)}${s.resume.prints ? ` (a sync under way: ${s.resume.prints.length} records of it committed)` : ''}` : '';
    print(`  ${name}: ${s.strategy}, ${sync !== '' && s.watermark === undefined ? sync.slice(2) : `watermark ${describeWatermark(s.watermark)}${sync}`}${s.generation ? `, generation ${s.generation}` : ''}${build}${runs(s)}`);
    const meta = Object.entries(s.metadata ?? {});
    if (meta.length > 0) print(`    metadata: ${meta.map(([k, v]) => `${k}=${v}`).join(', ')}`);
    const v = s.lastVerify;
    if (v !== undefined) print(`    last verify: ${v.status}${v.repaired ? ' (repaired)' : ''} at ${v.at}; source ${v.sourceRows} rows, destination ${v.destinationRows}; ${v.missing} missing, ${v.extra} extra, ${v.changed} changed${v.sample !== undefined ? `; sample ${v.sample}` : ''}`);
  }
}

function runs(s: StreamState): string {
  if (s.runCount === undefined) return '';
  return `; ${s.runCount} run${s.runCount === 1 ? '' : 's'}, last ${s.lastRunAt ?? '?'} (run ${s.lastRunId ?? '?'})`;
}

/** `--meta key=value` (repeatable): `key=` removes the key. */
function metaEntries(given: readonly string[]): Record<string, string | null> {
  const entries: Record<string, string | null> = {};
  for (const item of given) {
    const at = item.indexOf('=');
    if (at <= 0) throw new UsageError(`--meta ${item}: expected key=value (key= removes the key)`);
    const value = item.slice(at + 1);
    entries[item.slice(0, at)] = value === '' ? null : value;
  }
  return entries;
}

export interface StateCommandOptions {
  readonly config?: string;
  readonly json?: boolean;
  readonly cursor?: string;
  readonly pk?: string[];
  /** set: the sync token (or delta link) of an HTTP sync stream. */
  readonly syncToken?: string;
  readonly from?: string;
  readonly to?: string;
  readonly force?: boolean;
  /** list / delete: the store to look in (`file:<dir>`, `sqlite:<file>`, `postgres://…`, …) instead of --config's. */
  readonly store?: string;
  /** list / delete / migrate: endpoint and region of an `s3://` store (default: the AWS_* environment variables). */
  readonly endpoint?: string;
  readonly region?: string;
  /** delete: no question asked. */
  readonly yes?: boolean;
  /** export / import: `singer` or `airbyte` (default: airbyte for an Airbyte source, else singer). */
  readonly format?: string;
  /** set: `key=value` entries of the stream's metadata. */
  readonly meta?: readonly string[];
}

function stateFormat(options: StateCommandOptions, sourceType: string): 'singer' | 'airbyte' {
  const format = options.format ?? (sourceType === 'airbyte' ? 'airbyte' : 'singer');
  if (format !== 'singer' && format !== 'airbyte') throw new UsageError(`--format ${format}: expected singer or airbyte`);
  return format;
}

export async function stateCommand(action: string, args: readonly string[], options: StateCommandOptions): Promise<number> {
  if (action === 'list' || action === 'delete') return catalogCommand(action, args, options);
  if (!options.config) throw new UsageError(`state ${action} needs a pipeline: --config <pipeline.yaml> or --pipeline <name>`);
  const pipeline = await loadPipelineOrTarget(options.config);
  const commands = stateCommands(pipeline);
  switch (action) {
    case 'show': {
      const shown = await commands.inspect();
      if (options.json) print(toJson(shown.state));
      else showState(shown.state);
      // On stderr, so `--json` output stays the state document.
      if (shown.warning !== undefined) printError(`warn: ${shown.warning}`);
      return 0;
    }
    case 'set': {
      const [stream] = args;
      const meta = options.meta ?? [];
      if (!stream || (options.cursor === undefined && options.syncToken === undefined && meta.length === 0) || (options.cursor !== undefined && options.syncToken !== undefined)) {
        throw new UsageError('usage: tidemark state set <stream> (--cursor VALUE [--pk VALUE…] | --sync-token TOKEN | --meta KEY=VALUE…) --config <pipeline.yaml>');
      }
      const entries = metaEntries(meta);
      let next = options.cursor !== undefined ? await commands.set(stream, options.cursor, options.pk ?? []) : undefined;
      if (options.syncToken !== undefined) next = await commands.setSyncToken(stream, options.syncToken);
      if (meta.length > 0) next = await commands.setMetadata(stream, entries);
      options.json ? print(toJson(next)) : showState(next!);
      return 0;
    }
    case 'reset': {
      // A log stream has no position to go back to: forgetting it means copying the table again from a new snapshot.
      const logged = pipeline.streams.filter((s) => s.strategy === 'log' && (args[0] === undefined || s.name === args[0])).map((s) => s.name);
      if (logged.length > 0 && options.yes !== true) {
        const question = `reset of ${logged.join(', ')} (strategy: log): the next run copies ${logged.length === 1 ? 'the table' : 'the tables'} again from a new snapshot (a mirror is emptied first) and then follows the log from there; continue? [y/N] `;
        if (!(await confirm(question))) throw new UsageError(`state reset: not confirmed; pass --yes to reset log streams without a question`);
      }
      const next = await commands.reset(args[0]);
      options.json ? print(toJson(next)) : showState(next);
      return 0;
    }
    case 'history': {
      const versions = await commands.history();
      const schemas = schemaVersions(versions);
      const changesAt = (version: number) => schemas.filter((s) => s.version === version);
      if (options.json) print(toJson(versions.map((v) => ({ ...v, schemaChanges: changesAt(v.version).map(({ stream, changes }) => ({ stream, changes })) }))));
      else {
        for (const v of versions) {
          print(`${v.version}\t${v.savedAt}\t${v.reason}\t${v.runId ?? '-'}`);
          for (const s of changesAt(v.version)) for (const change of s.changes) print(`  ${s.stream}: ${change}`);
        }
      }
      return 0;
    }
    case 'rollback': {
      const version = Number(args[0]);
      if (!Number.isInteger(version) || version < 1) throw new UsageError('usage: tidemark state rollback <version> --config <pipeline.yaml>');
      const next = await commands.rollback(version);
      options.json ? print(toJson(next)) : showState(next);
      return 0;
    }
    case 'export':
      print(JSON.stringify(stateFormat(options, pipeline.source.type) === 'airbyte' ? await commands.exportAirbyte() : await commands.exportSinger(), null, 2));
      return 0;
    case 'import': {
      const from = args[0];
      if (!from) throw new UsageError('usage: tidemark state import <file.json | -> --config <pipeline.yaml>');
      const text = from === '-' ? await readStdin() : await readFile(from, 'utf8');
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch (cause) {
        throw new UsageError(`${from}: not valid JSON: ${(cause as Error).message}`);
      }
      const next = stateFormat(options, pipeline.source.type) === 'airbyte' ? await commands.importAirbyte(parsed) : await commands.importSinger(parsed);
      options.json ? print(toJson(next)) : showState(next);
      return 0;
    }
    case 'migrate': {
      if (options.from === undefined || options.to === undefined) {
        throw new UsageError('usage: tidemark state migrate --from <store> --to <store> [--force] --config <pipeline.yaml>');
      }
      const access = bucketAccessOf(options);
      const result = await commands.migrate(parseStateSpec(options.from, undefined, access), parseStateSpec(options.to, undefined, access), { force: options.force === true });
      if (options.json) print(toJson(result));
      else print(result.copied === 0 ? `already migrated: state version ${result.state.version}` : `copied ${result.copied} state version(s); now at version ${result.state.version}`);
      return 0;
    }
    default:
      throw new UsageError(`unknown state action ${action} (list, show, set, reset, history, rollback, export, import, migrate, delete)`);
  }
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * `state list` (the pipelines of a store: name, streams, version, last run) and `state delete <pipeline>` (its
 * state and history, after confirmation), in the store named by --store or by the pipeline YAML's `state:`.
 */
async function catalogCommand(action: 'list' | 'delete', args: readonly string[], options: StateCommandOptions): Promise<number> {
  if (options.store === undefined && options.config === undefined) throw new UsageError(`state ${action} needs --store <store> or --config <pipeline.yaml>`);
  // With both, --store names the store and the YAML the pipeline whose lock `delete` takes.
  const pipeline = options.config !== undefined ? await loadPipelineOrTarget(options.config) : undefined;
  const spec = options.store !== undefined ? parseStateSpec(options.store, undefined, bucketAccessOf(options)) : pipeline!.state;
  if (action === 'list') {
    if (spec === 'destination') {
      // State kept in the destination: this pipeline is the only one the YAML names.
      const shown = [storedPipeline(await stateCommands(pipeline!).show())].filter((p) => p.version > 0);
      printCatalog('the destination', shown, options.json === true);
      return 0;
    }
    const { store, pipelines } = await listStoredPipelines(spec);
    printCatalog(store, pipelines, options.json === true);
    return 0;
  }
  const name = args[0] ?? pipeline?.name;
  if (name === undefined) throw new UsageError('usage: tidemark state delete <pipeline> --store <store> [--yes]');
  if (spec === 'destination') {
    throw new UsageError(
      `pipeline ${name} keeps its state in the destination, beside the rows it describes; state delete removes state from a separate store. To start the pipeline over use tidemark state reset (append streams are rebuilt)`,
    );
  }
  if (options.yes !== true && !(await confirm(`delete every state version of pipeline ${name}? [y/N] `))) {
    throw new UsageError(`state delete ${name}: not confirmed; pass --yes to delete without a question`);
  }
  const owner = pipeline !== undefined && pipeline.name === name ? pipeline : undefined;
  const { store, removed } = await deleteStoredPipeline(spec, name, owner);
  if (options.json) print(toJson({ pipeline: name, store, removed }));
  else {
    print(`deleted state of pipeline ${name} from ${store} (${removed} version${removed === 1 ? '' : 's'})`);
    // The destination keeps its own copy; the store is seeded from it at the next run.
    if (owner !== undefined) print(`the destination still holds its state; the next run of ${name} writes it into the store again`);
  }
  return 0;
}

function printCatalog(store: string, pipelines: readonly StoredPipeline[], json: boolean): void {
  if (json) {
    print(toJson(pipelines));
    return;
  }
  if (pipelines.length === 0) {
    print(`${store} holds no pipeline state`);
    return;
  }
  print(`${store}: ${pipelines.length} pipeline${pipelines.length === 1 ? '' : 's'}`);
  for (const p of pipelines) {
    const last = p.lastRunId !== null ? `last run ${p.lastRunId}${p.lastUpdate !== null ? ` at ${p.lastUpdate}` : ''}` : 'no run yet';
    print(`  ${p.pipeline}\tversion ${p.version}\tstreams: ${p.streams.join(', ') || '(none)'}\t${last}`);
  }
}
