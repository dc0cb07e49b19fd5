import { loadPipeline, run, type RunResult, type StreamResult, type Watermark } from '../../index.js';
import { stderrLogger } from '../../core/logger.js';
import { EXIT } from '../exit-codes.js';
import { formatCount, print, toJson } from '../output.js';

export interface RunCommandOptions {
  readonly full?: boolean;
  readonly stream?: readonly string[];
  readonly json?: boolean;
}

export function describeWatermark(w: Watermark | null | undefined): string {
  if (!w) return 'none';
  return [w.cursor.value, ...w.pk.map((p) => p.value)].join(' / ');
}

function summary(pipeline: string, s: StreamResult): string {
  const what =
    s.outcome === 'failed'
      ? `FAILED: ${s.error}`
      : `${formatCount(s.rows_read)} read, ${formatCount(s.rows_loaded)} loaded, ${formatCount(s.rows_rejected)} rejected` +
        ` in ${s.commits} commit${s.commits === 1 ? '' : 's'} (${(s.duration_ms / 1000).toFixed(2)}s)` +
        `${s.full ? ', new generation' : ''}; watermark ${describeWatermark(s.watermark)}`;
  return `${pipeline}.${s.stream}: ${what}`;
}

export async function runCommand(files: readonly string[], options: RunCommandOptions): Promise<number> {
  let code: number = EXIT.ok;
  for (const file of files) {
    const pipeline = await loadPipeline(file);
    const tty = process.stderr.isTTY === true && !options.json;
    const result: RunResult = await run(pipeline, {
      ...(options.full ? { full: true } : {}),
      ...(options.stream?.length ? { streams: options.stream } : {}),
      logger: stderrLogger(),
      ...(tty ? { onProgress: (stream: string, rows: number) => process.stderr.write(`\r${pipeline.name}.${stream}: ${formatCount(rows)} rows read`) } : {}),
    });
    if (tty) process.stderr.write('\r\x1b[K');
    if (options.json) print(toJson(result));
    else for (const s of result.streams) print(summary(pipeline.name, s));
    if (!result.ok) code = EXIT.failed;
  }
  return code;
}
