import { UsageError, loadPipeline, verifyPipeline, type KeyValues, type StreamVerify } from '../../index.js';
import { stderrLogger } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { formatCount, print, toJson } from '../output.js';

export interface VerifyCommandOptions {
  readonly config?: string;
  readonly stream?: readonly string[];
  readonly json?: boolean;
  readonly repair?: boolean;
  readonly sample?: string;
}

/** Keys shown per kind of difference in the text output (`--json` has them all). */
const SHOWN_KEYS = 20;

function keyText(key: KeyValues): string {
  return Object.entries(key)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}

function showStream(s: StreamVerify): void {
  if (s.status === 'skipped') return print(`skipped   ${s.stream}: ${s.reason}`);
  const counts = `source ${formatCount(s.sourceRows)} rows, destination ${formatCount(s.destinationRows)}`;
  const soft = s.softDeleted !== undefined && s.softDeleted > 0 ? ` (and ${formatCount(s.softDeleted)} soft-deleted)` : '';
  const pending = `${soft}${s.notYetLoaded > 0 ? `; ${formatCount(s.notYetLoaded)} source rows not yet loaded (past the watermark)` : ''}`;
  const sampled = s.sample !== undefined ? ` (a sample: ${Math.round(s.sample * 100)} % of the key ranges)` : '';
  if (s.status === 'ok') return print(`ok        ${s.stream}: ${counts}${pending}${sampled}`);
  print(`DRIFT     ${s.stream}: ${counts}; ${s.missing.length} missing, ${s.extra.length} extra, ${s.changed.length} changed${pending}`);
  for (const k of s.missing.slice(0, SHOWN_KEYS)) print(`  missing  ${keyText(k)}`);
  for (const k of s.extra.slice(0, SHOWN_KEYS)) print(`  extra    ${keyText(k)}`);
  for (const c of s.changed.slice(0, SHOWN_KEYS)) print(`  changed  ${keyText(c.key)}  (${c.columns.join(', ')})`);
  const hidden = Math.max(0, s.missing.length - SHOWN_KEYS) + Math.max(0, s.extra.length - SHOWN_KEYS) + Math.max(0, s.changed.length - SHOWN_KEYS);
  if (hidden > 0) print(`  … and ${hidden} more (--json lists every key)`);
}

/** Compares each table stream with its source; exits 1 when any stream drifted (as `ledger verify` on a mismatch). */
export async function verifyCommand(file: string, options: VerifyCommandOptions): Promise<number> {
  const pipeline = await loadPipeline(file);
  const sample = options.sample !== undefined ? Number(options.sample) : undefined;
  if (sample !== undefined && !(sample > 0 && sample <= 1)) throw new UsageError(`--sample: expected a fraction above 0 and at most 1 (0.1 compares a tenth of the ranges), got ${JSON.stringify(options.sample)}`);
  const report = await verifyPipeline(pipeline, {
    ...(options.stream ? { streams: options.stream } : {}),
    ...(options.repair ? { repair: true } : {}),
    ...(sample !== undefined ? { sample } : {}),
    // The result of each compared stream is kept (`lastVerify`: runs, state show, the dashboard), drift notified.
    record: true,
    logger: stderrLogger(),
  });
  if (options.json) print(toJson(report));
  else for (const s of report.streams) showStream(s);
  return report.ok ? EXIT.ok : EXIT.failed;
}
