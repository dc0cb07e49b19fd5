/**
 * The command line: argv parsing, output and exit codes. Every command is a thin function over the library.
 */
import { Command, CommanderError } from 'commander';
import { errorMessage } from '../core/errors.js';
import { demoCommand } from './commands/demo.js';
import { planCommand } from './commands/plan.js';
import { runCommand } from './commands/run.js';
import { runsCommand } from './commands/runs.js';
import { stateCommand } from './commands/state.js';
import { schemaCommand, validateCommand } from './commands/validate.js';
import { EXIT, exitCodeFor } from './exit-codes.js';
import { printError } from './output.js';

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

function program(setCode: (code: number) => void): Command {
  const cli = new Command('tidemark')
    .description('Incremental extract-and-load: exactly once, crash-safe, inspectable.')
    .exitOverride()
    .showHelpAfterError();
  const act = <A extends unknown[]>(fn: (...args: A) => Promise<number>) => async (...args: A) => setCode(await fn(...args));

  cli
    .command('run')
    .description('run pipelines: read what is new, load it, commit data and state together')
    .argument('<pipeline...>', 'pipeline YAML files')
    .option('--full', 'build every stream anew beside the live tables, then swap atomically')
    .option('--stream <name>', 'only this stream (repeatable)', collect)
    .option('--json', 'print the RunResult as JSON')
    .action(act((files: string[], o: { full?: boolean; stream?: string[]; json?: boolean }) => runCommand(files, o)));

  cli
    .command('plan')
    .description('show what the next run would read per stream: predicate, bound values, window')
    .argument('<pipeline>', 'pipeline YAML file')
    .option('--full', 'plan a full refresh')
    .option('--stream <name>', 'only this stream (repeatable)', collect)
    .option('--json', 'print JSON')
    .action(act((file: string, o: { full?: boolean; stream?: string[]; json?: boolean }) => planCommand(file, o)));

  cli
    .command('state')
    .description('inspect or edit state: list | show | set | reset | history | rollback | export | import')
    .argument('<action>')
    .argument('[args...]')
    .option('--config <file>', 'pipeline YAML file')
    .option('--cursor <value>', 'set: the cursor value')
    .option('--pk <value>', 'set: a primary-key value of the watermark (repeat for composite keys)', collect)
    .option('--json', 'print JSON')
    .action(act((action: string, args: string[], o: { config?: string; json?: boolean; cursor?: string; pk?: string[] }) => stateCommand(action, args, o)));

  cli
    .command('runs')
    .description('run history of a pipeline')
    .option('--config <file>', 'pipeline YAML file')
    .option('--limit <n>', 'how many rows', '50')
    .option('--json', 'print JSON')
    .action(act((o: { config?: string; json?: boolean; limit?: string }) => runsCommand(o)));

  cli
    .command('validate')
    .description('check pipeline files without connecting anywhere')
    .argument('<pipeline...>')
    .action(act((files: string[]) => validateCommand(files)));

  cli.command('schema').description('print the JSON Schema of pipeline files').action(act(() => schemaCommand()));

  cli
    .command('demo')
    .description('run the demo pipeline (SQLite shop → DuckDB) twice and show what moved')
    .option('--dir <dir>', 'where to put the demo files', 'demo')
    .action(act((o: { dir: string }) => demoCommand(o.dir)));

  return cli;
}

export async function main(argv: readonly string[]): Promise<number> {
  let code: number = EXIT.ok;
  try {
    await program((c) => (code = c)).parseAsync([...argv], { from: 'user' });
    return code;
  } catch (error) {
    if (error instanceof CommanderError) {
      return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    printError(`error: ${errorMessage(error)}`);
    return exitCodeFor(error);
  }
}
