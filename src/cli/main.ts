/**
 * The command line: argv parsing, output and exit codes. Every command is a thin function over the library.
 */
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';
import type { Command } from 'commander';
import { UsageError, errorFields, errorMessage } from '../core/errors.js';
import type { EnqueueCommandOptions } from './commands/enqueue.js';
import type { InitCommandOptions } from './commands/init.js';
import type { JobsCommandOptions } from './commands/jobs.js';
import type { RunCommandOptions } from './commands/run.js';
import type { ScheduleCommandOptions } from './commands/schedule.js';
import type { StateCommandOptions } from './commands/state.js';
import type { WorkerCommandOptions } from './commands/worker.js';
import { EXIT, exitCodeFor } from './exit-codes.js';
import { printError } from './output.js';
import { shutdownTelemetry } from '../telemetry/telemetry.js';
import { flushNotifications } from '../notify/notify.js';

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

/**
 * Each command's module is imported only when that command runs: a `tidemark run` never pays for the dashboard,
 * the queue or the scheduler (startup time is part of every no-op run).
 */
const commands = {
  run: () => import('./commands/run.js'),
  plan: () => import('./commands/plan.js'),
  discover: () => import('./commands/discover.js'),
  check: () => import('./commands/check.js'),
  state: () => import('./commands/state.js'),
  ledger: () => import('./commands/ledger.js'),
  verify: () => import('./commands/verify.js'),
  lake: () => import('./commands/lake.js'),
  runs: () => import('./commands/runs.js'),
  cdc: () => import('./commands/cdc.js'),
  rejects: () => import('./commands/rejects.js'),
  target: () => import('./commands/target.js'),
  airbyteDestination: () => import('./commands/airbyte-destination.js'),
  validate: () => import('./commands/validate.js'),
  init: () => import('./commands/init.js'),
  demo: () => import('./commands/demo.js'),
  ui: () => import('./commands/ui.js'),
  schedule: () => import('./commands/schedule.js'),
  worker: () => import('./commands/worker.js'),
  enqueue: () => import('./commands/enqueue.js'),
  jobs: () => import('./commands/jobs.js'),
};

/** `tidemark run`'s options, as data: commander's help and the fast path below read the same table. */
const RUN_OPTIONS = {
  full: { type: 'boolean', flag: '--full', help: 'build every stream anew beside the live tables, then swap atomically' },
  stream: { type: 'string', multiple: true, flag: '--stream <name>', help: 'only this stream (repeatable)' },
  json: { type: 'boolean', flag: '--json', help: 'print the RunResult as JSON' },
  strict: { type: 'boolean', flag: '--strict', help: 'fail a files stream whose pattern matches no file (default: a warning)' },
  verbose: { type: 'boolean', flag: '--verbose', help: "log at debug level (a connector's LOG lines and error stacks included)" },
  follow: { type: 'boolean', flag: '--follow', help: 'log streams (strategy: log): keep applying changes until SIGTERM (default: up to the log position at start)' },
  until: { type: 'string', flag: '--until <value>', help: "incremental streams read up to this cursor value (typed by the cursor's type) and their watermark never passes it" },
  dir: { type: 'string', flag: '--dir <dir>', help: `where pipeline names are looked up (default: $TIDEMARK_PIPELINES_DIR, else ./pipelines, else .)` },
} as const;

const DIR_HELP = RUN_OPTIONS.dir.help;

/**
 * A well-formed `tidemark run …` skips commander (~12 ms to load, a tenth of a no-op run); anything else — help, a
 * typo, another command — goes through commander, which explains it.
 */
function plainRun(argv: readonly string[]): { files: string[]; options: RunCommandOptions } | undefined {
  if (argv[0] !== 'run') return undefined;
  try {
    const { values, positionals } = parseArgs({ args: argv.slice(1), options: RUN_OPTIONS, allowPositionals: true, strict: true });
    return { files: positionals, options: { ...values, ...(values.stream ? { stream: [...values.stream] } : {}) } };
  } catch {
    return undefined;
  }
}

function program(Command: typeof import('commander').Command, setCode: (code: number) => void): Command {
  // src/cli, dist/cli and the bundle in dist/bin all sit two levels below the package root.
  const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };
  const cli = new Command('tidemark')
    .description('Incremental extract-and-load: exactly once, crash-safe, inspectable.')
    .version(version, '-V, --version', 'print the version')
    // Taken out of argv by main() before any command sees it; declared here for --help.
    .option('--log-format <format>', 'text (default) or json: log lines and errors on stderr as one JSON object a line (also TIDEMARK_LOG_FORMAT=json)')
    .exitOverride()
    .showHelpAfterError();
  const act = <A extends unknown[]>(fn: (...args: A) => Promise<number>) => async (...args: A) => setCode(await fn(...args));

  cli
    .command('run')
    .description('run pipelines: read what is new, load it, commit data and state together')
    .argument('[pipeline...]', 'pipeline names, YAML files or folders of them (none: every pipeline of --dir)')
    .option(RUN_OPTIONS.full.flag, RUN_OPTIONS.full.help)
    .option(RUN_OPTIONS.stream.flag, RUN_OPTIONS.stream.help, collect)
    .option(RUN_OPTIONS.json.flag, RUN_OPTIONS.json.help)
    .option(RUN_OPTIONS.strict.flag, RUN_OPTIONS.strict.help)
    .option(RUN_OPTIONS.verbose.flag, RUN_OPTIONS.verbose.help)
    .option(RUN_OPTIONS.follow.flag, RUN_OPTIONS.follow.help)
    .option(RUN_OPTIONS.until.flag, RUN_OPTIONS.until.help)
    .option(RUN_OPTIONS.dir.flag, RUN_OPTIONS.dir.help)
    .action(act(async (files: string[], o: RunCommandOptions) => (await commands.run()).runCommand(files, o)));

  cli
    .command('plan')
    .description('show what the next run would read per stream: predicate, bound values, window')
    .argument('[pipeline...]', 'pipeline names, YAML files or folders of them (none: every pipeline of --dir)')
    .option('--full', 'plan a full refresh')
    .option('--stream <name>', 'only this stream (repeatable)', collect)
    .option('--json', 'print JSON')
    .option('--dir <dir>', DIR_HELP)
    .action(act(async (files: string[], o: { full?: boolean; stream?: string[]; json?: boolean; dir?: string }) => (await commands.plan()).planCommand(files, o)));

  cli
    .command('discover')
    .description('list every stream the source offers (tables, catalogs, configured endpoints and files): fields, modes, key and cursor candidates')
    .argument('<pipeline>', 'pipeline name or file')
    .option('--json', 'print JSON')
    .option('--dir <dir>', DIR_HELP)
    .action(act(async (file: string, o: { json?: boolean; dir?: string }) => (await commands.discover()).discoverCommand(file, o)));

  cli
    .command('check')
    .description('check that the source can serve every stream (connection, tables and columns, endpoints, files, tap or connector, code streams); exit 1 on a problem')
    .argument('<pipeline>', 'pipeline file')
    .option('--json', 'print the status and its problems (key, message) as JSON')
    .action(act(async (file: string, o: { json?: boolean }) => (await commands.check()).checkCommand(file, o)));

  cli
    .command('state')
    .description('inspect or edit state: list | show | set | reset | history | rollback | export | import | migrate | delete')
    .argument('<action>')
    .argument('[args...]')
    .option('--config <file>', 'pipeline YAML file or pipeline name')
    .option('-p, --pipeline <name>', 'the pipeline, by name (looked up in --dir) or file; the same as --config')
    .option('--dir <dir>', DIR_HELP)
    .option('--cursor <value>', 'set: the cursor value')
    .option('--pk <value>', 'set: a primary-key value of the watermark (repeat for composite keys)', collect)
    .option('--sync-token <token>', 'set: the sync token (or delta link) an HTTP sync stream (sync:) starts from at its next run')
    .option('--meta <key=value>', "set: a key of the stream's metadata, kept in its state (repeatable; key= removes it)", collect)
    .option('--json', 'print JSON')
    .option('--from <store>', 'migrate: destination | file:<dir> | sqlite:<file> | postgres://…[?schema=s] | s3://bucket/prefix')
    .option('--to <store>', 'migrate: the store to copy state and history into')
    .option('--force', 'migrate: write over a target that already holds a different state')
    .option('--format <format>', 'export / import: singer or airbyte (default: airbyte for an Airbyte source, else singer)')
    .option('--store <store>', 'list | delete: this store instead of the one --config names (file:<dir> | sqlite:<file> | postgres://…[?schema=s] | s3://bucket/prefix)')
    .option('--endpoint <url>', 'list | delete | migrate: the S3-compatible endpoint of an s3:// store (default: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS S3)')
    .option('--region <region>', 'list | delete | migrate: the region of an s3:// store (default: AWS_REGION or AWS_DEFAULT_REGION); credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or the AWS credential chain')
    .option('--yes', 'delete, and reset of a log stream: do not ask for confirmation')
    .addHelpText(
      'after',
      `
reset [stream], rollback <version>, set <stream> on an append stream (write: append) never append rows twice:
  reset, and a rollback to a watermark behind the current one, make the next run rebuild the stream: it loads
  a new generation beside the live table and swaps it in (as run --full does); the live table stays readable
  until then. set refuses to move an append stream's watermark back. On merge streams the rows read again are
  merged on the primary key.`,
    )
    .action(
      act(async (action: string, args: string[], o: StateCommandOptions & { pipeline?: string; dir?: string }) =>
        (await commands.state()).stateCommand(action, args, await pipelineOption(o)),
      ),
    );

  cli
    .command('ledger')
    .description('partition ledger of partitioned streams: list | reload <partition…> | forget <partition…> | verify')
    .argument('<action>')
    .argument('[partitions...]')
    .option('--config <file>', 'pipeline YAML file or pipeline name')
    .option('-p, --pipeline <name>', 'the pipeline, by name (looked up in --dir) or file; the same as --config')
    .option('--dir <dir>', DIR_HELP)
    .option('--stream <name>', 'the partitioned stream (needed when a pipeline has several)')
    .option('--json', 'print JSON')
    .action(
      act(async (action: string, partitions: string[], o: { config?: string; pipeline?: string; dir?: string; stream?: string; json?: boolean }) =>
        (await commands.ledger()).ledgerCommand(action, partitions, await pipelineOption(o)),
      ),
    );

  cli
    .command('verify')
    .description('compare each table stream with its source by ranges of checksums; print missing, extra and changed keys; exit 1 on drift')
    .argument('<pipeline>', 'pipeline name or YAML file')
    .option('--stream <name>', 'only this stream (repeatable)', collect)
    .option('--repair', 'reload exactly the differing keys (merge streams), under the pipeline lease')
    .option('--sample <fraction>', 'compare only this fraction of each stream\'s key ranges, picked at random (0 < f ≤ 1)')
    .option('--dir <dir>', DIR_HELP)
    .option('--json', 'print JSON')
    .action(
      act(async (given: string, o: { stream?: string[]; json?: boolean; repair?: boolean; sample?: string; dir?: string }) =>
        (await commands.verify()).verifyCommand((await pipelineOption({ config: given, ...(o.dir !== undefined ? { dir: o.dir } : {}) })).config!, o),
      ),
    );

  cli
    .command('lake')
    .description('maintain a lake (type: files): compact <pipeline.yaml> rewrites small part files into larger ones, in one commit')
    .argument('<action>')
    .argument('<pipeline>')
    .option('--stream <name>', 'only this stream')
    .option('--target-size <size>', 'size of the rewritten files (default: the destination\'s compact_target_size, 128MB)')
    .option('--json', 'print JSON')
    .action(act(async (action: string, file: string, o: { stream?: string; targetSize?: string; json?: boolean }) => (await commands.lake()).lakeCommand(action, file, o)));

  cli
    .command('cdc')
    .description('the change log of strategy: log streams: status (slot, retained WAL, lag) | drop (slot and publication)')
    .argument('<action>', 'status | drop')
    .argument('<pipeline>', 'pipeline YAML file')
    .option('--json', 'print JSON')
    .action(act(async (action: string, file: string, o: { json?: boolean }) => (await commands.cdc()).cdcCommand(action, file, o)));

  cli
    .command('runs')
    .description('run history of a pipeline: every run of every stream, the ones that found nothing to load too')
    .argument('[pipeline]', 'pipeline name or YAML file (or --config)')
    .option('--config <file>', 'pipeline YAML file or pipeline name')
    .option('--dir <dir>', DIR_HELP)
    .option('--limit <n>', 'how many rows', '50')
    .option('--json', 'print JSON')
    .action(
      act(async (name: string | undefined, o: { config?: string; dir?: string; json?: boolean; limit?: string }) =>
        (await commands.runs()).runsCommand(await pipelineOption({ ...o, ...(name !== undefined ? { pipeline: name } : {}) })),
      ),
    );

  cli
    .command('rejects')
    .description('rows the destination refused: newest first, with the reason and the row as read')
    .argument('<pipeline>', 'pipeline YAML file')
    .option('--stream <name>', 'only this stream')
    .option('--limit <n>', 'how many rows', '100')
    .option('--json', 'print JSON')
    .action(act(async (file: string, o: { stream?: string; limit?: string; json?: boolean }) => (await commands.rejects()).rejectsCommand(file, o)));

  cli
    .command('target')
    .description('act as a Singer target: load the Singer messages on stdin, print each STATE once it is committed')
    .option('--config <file>', 'pipeline YAML file (destination and optional stream settings)')
    .action(act(async (o: { config?: string }) => (await commands.target()).targetCommand(o)));

  cli
    .command('airbyte-destination')
    .description('act as an Airbyte destination: spec, check, or write the RECORD/STATE messages on stdin, echoing each STATE once it is committed')
    .argument('<action>', 'spec, check or write')
    .option('--config <file>', 'the destination config (JSON, as described by spec)')
    .option('--catalog <file>', 'write: the configured catalog (JSON)')
    .action(act(async (action: string, o: { config?: string; catalog?: string }) => (await commands.airbyteDestination()).airbyteDestinationCommand(action, o)));

  cli
    .command('validate')
    .description('check pipeline files without connecting anywhere (a lake destination is read for who owns its streams); with --connect, also both ends')
    .argument('[pipeline...]', 'pipeline names, YAML files or folders of them (none: every pipeline of --dir)')
    .option('--dir <dir>', DIR_HELP)
    .option('--connect', 'open the source and destination and check what a run needs: tables, columns, cursor type, keys, log privileges, a writable destination with room (exit 1 on a problem)')
    .action(act(async (files: string[], o: { dir?: string; connect?: boolean }) => (await commands.validate()).validateCommand(files, o)));

  cli
    .command('init')
    .description('write a pipeline YAML for the tables of a Postgres, MySQL/MariaDB or SQLite database, with a cursor and key proposed for each')
    .option('--source <url>', 'postgres://…, mysql://…, mariadb://…, sqlite:<file> or a SQLite file (asked when not given)')
    .option('--destination <spec>', 'duckdb[:<file>] (default duckdb:./warehouse.duckdb), sqlite:<file> or postgres://…[?schema=s]')
    .option('--name <name>', 'the pipeline name (default: the database name)')
    .option('-o, --output <file>', 'the file to write', 'pipeline.yaml')
    .option('--yes', 'do not ask: write what is proposed')
    .option('--force', 'with --yes: replace an existing file')
    .action(act(async (o: InitCommandOptions) => (await commands.init()).initCommand(o)));

  cli.command('schema').description('print the JSON Schema of pipeline files').action(act(async () => (await commands.validate()).schemaCommand()));

  cli
    .command('demo')
    .description('run the demo pipeline (SQLite shop → DuckDB) twice and show what moved')
    .option('--dir <dir>', 'where to put the demo files', 'demo')
    .action(act(async (o: { dir: string }) => (await commands.demo()).demoCommand(o.dir)));

  cli
    .command('ui')
    .description('serve a local dashboard of pipelines, state, runs and ledgers')
    .argument('[pipelines...]', 'pipeline YAML files or directories of them (default: .)')
    .option('--port <port>', 'port to listen on (0: any free port)', '4680')
    .option('--host <host>', 'address to bind (default 127.0.0.1; a non-loopback address only when given here)')
    .option('--allow-actions', 'enable run now, state reset and ledger reload/forget (each asks for confirmation)')
    .action(act(async (inputs: string[], o: { port?: string; host?: string; allowActions?: boolean }) => (await commands.ui()).uiCommand(inputs, o)));

  const queueOptions = (command: Command, required: boolean): Command =>
    command
      [required ? 'requiredOption' : 'option']('--queue <url>', `Redis URL of the job queue, e.g. redis://127.0.0.1:6379${required ? ' (required)' : ''}`)
      .option('--queue-name <name>', 'BullMQ queue name', 'tidemark')
      .option('--queue-prefix <prefix>', 'prefix of the queue\'s Redis keys', 'tidemark');

  queueOptions(
    cli
      .command('schedule')
      .description('run pipelines on their schedule: (cron, timezone:) until SIGTERM/SIGINT; with --queue, enqueue them for workers')
      .argument('<pipelines...>', 'a directory of pipeline YAML files, or the files')
      .option('--once', 'run everything due now, then exit (for system cron / CI)')
      .option('--grace <duration>', 'on SIGTERM/SIGINT, how long running runs may take to finish before they are rolled back', '30s')
      .option('--state-file <file>', `where the last tick per pipeline is kept (default: .tidemark-schedule.json beside the pipelines)`)
      .option('--json', 'with --once: print the outcomes as JSON')
      .option(METRICS_PORT.flag, METRICS_PORT.help)
      .option(METRICS_HOST.flag, METRICS_HOST.help),
    false,
  ).action(act(async (inputs: string[], o: ScheduleCommandOptions) => (await commands.schedule()).scheduleCommand(inputs, o)));

  queueOptions(
    cli
      .command('worker')
      .description('process pipeline jobs from the queue until SIGTERM/SIGINT')
      .option('--concurrency <n>', 'jobs this process runs at once', '1')
      .option('--name <name>', 'worker name shown by `tidemark runs` (default host:pid)')
      .option('--grace <duration>', 'on SIGTERM/SIGINT, how long running jobs may take to finish', '30s')
      .option('--lock-duration <duration>', 'how long a job stays locked to this worker without renewal (stall detection)', '30s')
      .option('--stalled-interval <duration>', 'how often to look for jobs of dead or paused workers', '30s')
      .option(METRICS_PORT.flag, METRICS_PORT.help)
      .option(METRICS_HOST.flag, METRICS_HOST.help),
    true,
  ).action(act(async (o: WorkerCommandOptions) => (await commands.worker()).workerCommand(o)));

  queueOptions(
    cli
      .command('enqueue')
      .description('put pipeline runs on the queue: one job per stream, one per pending partition of a partitioned stream, one per range of a ranged build or incremental first load into Postgres')
      .argument('<pipeline...>', 'pipeline YAML files')
      .option('--partition <id>', 'only this partition (repeatable)', collect)
      .option('--stream <name>', 'only this stream (repeatable)', collect)
      .option('--full', 'full refresh')
      .option('--json', 'print the jobs as JSON'),
    true,
  ).action(act(async (files: string[], o: EnqueueCommandOptions) => (await commands.enqueue()).enqueueCommand(files, o)));

  queueOptions(
    cli
      .command('jobs')
      .description('list the queue\'s active, waiting, delayed and failed jobs: unit, attempts, last error')
      .option('--json', 'print the jobs as JSON'),
    true,
  ).action(act(async (o: JobsCommandOptions) => (await commands.jobs()).jobsCommand(o)));

  return cli;
}

/**
 * `--pipeline <name>` / `--config <file | name>` → `config: <file>`: a name is looked up in the pipelines folder, so
 * every command that takes --config also takes a pipeline's name.
 */
async function pipelineOption<O extends { config?: string; pipeline?: string; dir?: string }>(options: O): Promise<O> {
  const given = options.pipeline ?? options.config;
  if (given === undefined) return options;
  if (options.pipeline !== undefined && options.config !== undefined && options.pipeline !== options.config) {
    throw new UsageError('give the pipeline once: --pipeline or --config, not both');
  }
  const { resolvePipeline } = await import('../config/pipeline-names.js');
  return { ...options, config: await resolvePipeline(given, options.dir !== undefined ? { dir: options.dir } : {}) };
}

/**
 * `--log-format <text|json>` (or `=`), anywhere in argv, becomes TIDEMARK_LOG_FORMAT, which every logger reads; the
 * rest of argv goes on, so each command (and run's fast path) parses only its own options.
 */
function takeLogFormat(argv: readonly string[]): readonly string[] {
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]!;
    const value = arg === '--log-format' ? argv[++i] : arg.startsWith('--log-format=') ? arg.slice('--log-format='.length) : undefined;
    if (value === undefined && arg !== '--log-format') {
      rest.push(arg);
      continue;
    }
    if (value !== 'text' && value !== 'json') throw new UsageError(`--log-format must be text or json, not ${value ?? 'nothing'}`);
    process.env.TIDEMARK_LOG_FORMAT = value;
  }
  return rest;
}

const METRICS_PORT = { flag: '--metrics-port <port>', help: 'serve Prometheus metrics of the runs at http://HOST:PORT/metrics (0: any free port)' };
const METRICS_HOST = { flag: '--metrics-host <host>', help: 'address the metrics endpoint binds (default 127.0.0.1)' };

export async function main(all: readonly string[]): Promise<number> {
  let code: number = EXIT.ok;
  let commander: typeof import('commander') | undefined;
  try {
    const argv = takeLogFormat(all);
    const plain = plainRun(argv);
    if (plain !== undefined) return await (await commands.run()).runCommand(plain.files, plain.options);
    commander = await import('commander');
    await program(commander.Command, (c) => (code = c)).parseAsync([...argv], { from: 'user' });
    return code;
  } catch (error) {
    if (commander !== undefined && error instanceof commander.CommanderError) {
      return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    printError(`error: ${errorMessage(error)}`, errorFields(error));
    return exitCodeFor(error);
  } finally {
    // Buffered spans and the last metric figures go out before the process exits (a no-op when telemetry is off).
    await shutdownTelemetry().catch((error: unknown) => printError(`warning: telemetry export failed: ${errorMessage(error)}`));
    await flushNotifications();
  }
}
