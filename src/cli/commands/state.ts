import { readFile } from 'node:fs/promises';
import { UsageError, loadPipelineOrTarget, parseStateSpec, stateCommands, type PipelineState } from '../../index.js';
import { print, printError, toJson } from '../output.js';
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
    print(`  ${name}: ${s.strategy}, watermark ${describeWatermark(s.watermark)}${s.generation ? `, generation ${s.generation}` : ''}${build}`);
  }
}

export interface StateCommandOptions {
  readonly config?: string;
  readonly json?: boolean;
  readonly cursor?: string;
  readonly pk?: string[];
  readonly from?: string;
  readonly to?: string;
  readonly force?: boolean;
}

export async function stateCommand(action: string, args: readonly string[], options: StateCommandOptions): Promise<number> {
  if (!options.config) throw new UsageError(`state ${action} needs --config <pipeline.yaml>`);
  const commands = stateCommands(await loadPipelineOrTarget(options.config));
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
      if (!stream || options.cursor === undefined) throw new UsageError('usage: tidemark state set <stream> --cursor VALUE [--pk VALUE…] --config <pipeline.yaml>');
      const next = await commands.set(stream, options.cursor, options.pk ?? []);
      options.json ? print(toJson(next)) : showState(next);
      return 0;
    }
    case 'reset': {
      const next = await commands.reset(args[0]);
      options.json ? print(toJson(next)) : showState(next);
      return 0;
    }
    case 'history': {
      const versions = await commands.history();
      if (options.json) print(toJson(versions));
      else for (const v of versions) print(`${v.version}\t${v.savedAt}\t${v.reason}\t${v.runId ?? '-'}`);
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
      print(JSON.stringify(await commands.exportSinger(), null, 2));
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
      const next = await commands.importSinger(parsed);
      options.json ? print(toJson(next)) : showState(next);
      return 0;
    }
    case 'migrate': {
      if (options.from === undefined || options.to === undefined) {
        throw new UsageError('usage: tidemark state migrate --from <store> --to <store> [--force] --config <pipeline.yaml>');
      }
      const result = await commands.migrate(parseStateSpec(options.from), parseStateSpec(options.to), { force: options.force === true });
      if (options.json) print(toJson(result));
      else print(result.copied === 0 ? `already migrated: state version ${result.state.version}` : `copied ${result.copied} state version(s); now at version ${result.state.version}`);
      return 0;
    }
    default:
      throw new UsageError(`unknown state action ${action} (list, show, set, reset, history, rollback, export, import, migrate)`);
  }
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
