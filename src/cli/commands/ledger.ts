import { UsageError, ledgerCommands, loadPipeline, type LedgerCheck, type LedgerListEntry } from '../../index.js';
import { stderrLogger } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { formatCount, print, toJson } from '../output.js';
import { summary } from './run.js';

export interface LedgerCommandOptions {
  readonly config?: string;
  readonly stream?: string;
  readonly json?: boolean;
}

function showEntries(entries: readonly LedgerListEntry[]): void {
  if (entries.length === 0) print('(no partitions loaded)');
  for (const e of entries) {
    const files = e.files.map((f) => f.path).join(', ');
    const load =
      e.runId === null
        ? 'never loaded'
        : e.deleted
          ? `rows deleted ${e.loadedAt}  run ${e.runId}  files were: ${files}`
          : `${formatCount(e.rows)} rows  ${formatCount(e.bytes)} bytes  ${e.loadedAt}  run ${e.runId}  files: ${files}`;
    print(`${e.stream}  ${e.partition}  ${e.status}  ${load}`);
    if (e.change !== undefined) print(`    ${e.change}`);
    if (e.failure !== undefined) print(`    last load failed ${e.failure.failedAt}  run ${e.failure.runId}: ${e.failure.error}`);
  }
}

function showChecks(checks: readonly LedgerCheck[]): void {
  for (const c of checks) {
    const ledger = c.ledgerRows === null ? 'no ledger row' : `ledger ${formatCount(c.ledgerRows)}`;
    const checksum = c.checksum === undefined ? '' : c.checksum === 'equal' ? ', checksum equal' : ', rows changed since the load (checksum)';
    print(`${c.ok ? 'ok      ' : 'MISMATCH'}  ${c.stream}  ${c.partition}  ${ledger}, table ${formatCount(c.tableRows)}${checksum}`);
  }
  const bad = checks.filter((c) => !c.ok).length;
  print(bad === 0 ? `${checks.length} partitions agree with the ledger` : `${bad} of ${checks.length} partitions disagree with the ledger`);
}

export async function ledgerCommand(action: string, partitions: readonly string[], options: LedgerCommandOptions): Promise<number> {
  if (!options.config) throw new UsageError(`ledger ${action} needs a pipeline: --config <pipeline.yaml> or --pipeline <name>`);
  const pipeline = await loadPipeline(options.config);
  const commands = ledgerCommands(pipeline);
  switch (action) {
    case 'list': {
      const entries = await commands.list(options.stream);
      options.json ? print(toJson(entries)) : showEntries(entries);
      return EXIT.ok;
    }
    case 'reload': {
      const result = await commands.reload(partitions, options.stream, { logger: stderrLogger() });
      if (options.json) print(toJson(result));
      else for (const s of result.streams) print(summary(pipeline.name, s));
      return result.ok ? EXIT.ok : EXIT.failed;
    }
    case 'forget': {
      const removed = await commands.forget(partitions, options.stream);
      options.json ? print(toJson({ forgotten: removed })) : print(`forgot ${removed} partition${removed === 1 ? '' : 's'}; the next run loads ${removed === 1 ? 'it' : 'them'} again`);
      return EXIT.ok;
    }
    case 'verify': {
      const checks = await commands.verify(options.stream);
      options.json ? print(toJson(checks)) : showChecks(checks);
      return checks.every((c) => c.ok) ? EXIT.ok : EXIT.failed;
    }
    default:
      throw new UsageError(`unknown ledger action ${action} (list, reload, forget, verify)`);
  }
}
