/**
 * `tidemark init`: reads the catalog of a Postgres, MySQL/MariaDB or SQLite database and writes a commented pipeline
 * YAML with one stream per table, a proposed cursor and key each, and the editor's schema line. Asks before it
 * writes, and never writes over a file unasked.
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { pipelineJsonSchema } from '../../config/json-schema.js';
import { UsageError } from '../../core/errors.js';
import { listTables } from '../../init/catalog.js';
import { initDestination, initSource } from '../../init/init-sources.js';
import { pipelineYaml, proposeStreams, usableName } from '../../init/proposal.js';
import { EXIT } from '../exit-codes.js';
import { print } from '../output.js';
import { ask, confirm } from '../prompt.js';

export interface InitCommandOptions {
  readonly source?: string;
  readonly destination?: string;
  readonly name?: string;
  readonly output?: string;
  /** No questions: write what is proposed (an existing file only with `force`). */
  readonly yes?: boolean;
  readonly force?: boolean;
}

/** The schema file the `# yaml-language-server` line names, written beside the pipeline when missing. */
const SCHEMA_FILE = 'tidemark.schema.json';

export async function initCommand(options: InitCommandOptions): Promise<number> {
  const file = resolve(options.output ?? 'pipeline.yaml');
  const spec = options.source ?? (options.yes ? undefined : await ask('source (postgres://…, mysql://…, mariadb://… or a SQLite file): '));
  if (!spec) throw new UsageError('init needs --source <postgres://… | mysql://… | mariadb://… | sqlite:<file>>');
  const source = initSource(spec, file);
  const destination = initDestination(options.destination, file);
  const tables = await listTables(source.catalog);
  if (tables.length === 0) throw new UsageError(`${source.described} has no tables to load`);
  const streams = proposeStreams(tables);

  print(`${source.described}: ${tables.length} table${tables.length === 1 ? '' : 's'}`);
  for (const s of streams) print(`  ${s.table}: ${s.strategy}${s.cursor !== undefined ? `, cursor ${s.cursor}` : ''}${s.primaryKey.length > 0 ? `, key (${s.primaryKey.join(', ')})` : ''}`);
  if (!(await mayWrite(file, options))) return EXIT.usage;

  const name = usableName(options.name ?? source.defaultName);
  const text = pipelineYaml({ name, source: source.yaml, destination: destination.yaml, described: source.described, streams, schemaRef: `./${SCHEMA_FILE}` });
  // 'wx' unless the user agreed to replace it: a file that appeared since the question is not written over.
  await writeFile(file, text, { flag: existsSync(file) ? 'w' : 'wx' });
  const schema = join(dirname(file), SCHEMA_FILE);
  const newSchema = !existsSync(schema);
  if (newSchema) await writeFile(schema, `${JSON.stringify(pipelineJsonSchema(), null, 2)}\n`, { flag: 'wx' });
  print(`wrote ${file} (pipeline ${name}, ${streams.length} stream${streams.length === 1 ? '' : 's'})${newSchema ? ` and ${schema} for editors` : ''}`);
  for (const variable of new Set([source.passwordVariable, destination.passwordVariable].filter((v) => v !== undefined))) {
    print(`the password is read from $${variable}: export ${variable}=… before running it`);
  }
  print(`next: tidemark validate ${options.output ?? 'pipeline.yaml'} && tidemark run ${options.output ?? 'pipeline.yaml'}`);
  return EXIT.ok;
}

/** Whether to write: `--yes` writes a new file and replaces one only with `--force`; otherwise the user is asked. */
async function mayWrite(file: string, options: InitCommandOptions): Promise<boolean> {
  const exists = existsSync(file);
  if (options.yes) {
    if (exists && !options.force) throw new UsageError(`${file} exists; init --yes does not write over it (pass --force to replace it, or -o <another file>)`);
    return true;
  }
  if (!process.stdin.isTTY) throw new UsageError(`no terminal to confirm on; pass --yes to write ${file}${exists ? ' (and --force to replace it)' : ''}`);
  const yes = exists ? await confirm(`${file} exists; replace it? [y/N] `) : await confirm(`write ${file}? [Y/n] `, true);
  if (!yes) print(`nothing written`);
  return yes;
}
