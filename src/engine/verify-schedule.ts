/**
 * `verify:` in a pipeline: after a run, `tidemark verify` runs when the pipeline's last verify is older than
 * `every` (or there was none), over `sample` of the key ranges, and its result is stored (`lastVerify`) and drift
 * notified. It never changes the run's outcome: a verify that fails is logged.
 */
import type { PipelineConfig } from '../config/load.js';
import { errorMessage } from '../core/errors.js';
import { silentLogger, type Logger } from '../core/logger.js';
import type { PipelineState } from '../core/types.js';
import { openStateStore } from './state-admin.js';
import { verifyPipeline, type VerifyReport } from './verify.js';

/** When the pipeline was last verified: the newest `lastVerify.at` of its streams. */
export function lastVerifiedAt(state: PipelineState | undefined): number | undefined {
  const times = Object.values(state?.streams ?? {}).flatMap((s) => (s.lastVerify !== undefined ? [Date.parse(s.lastVerify.at)] : []));
  return times.length > 0 ? Math.max(...times) : undefined;
}

export function verifyDue(pipeline: PipelineConfig, state: PipelineState | undefined, now = Date.now()): boolean {
  if (pipeline.verify === undefined) return false;
  const last = lastVerifiedAt(state);
  return last === undefined || now - last >= pipeline.verify.everyMs;
}

/** Runs the scheduled verify when due; the report, or undefined when not due (or it failed, logged). */
export async function verifyWhenDue(pipeline: PipelineConfig, options: { readonly logger?: Logger; readonly now?: number } = {}): Promise<VerifyReport | undefined> {
  const logger = options.logger ?? silentLogger;
  if (pipeline.verify === undefined) return undefined;
  try {
    const opened = await openStateStore(pipeline);
    let state: PipelineState | undefined;
    try {
      state = await opened.store.load(pipeline.name);
    } finally {
      await opened.close();
    }
    if (!verifyDue(pipeline, state, options.now)) return undefined;
    const report = await verifyPipeline(pipeline, { record: true, logger, ...(pipeline.verify.sample !== undefined ? { sample: pipeline.verify.sample } : {}) });
    for (const s of report.streams) {
      if (s.status === 'skipped') continue;
      const counts = `source ${s.sourceRows} rows, destination ${s.destinationRows}`;
      if (s.status === 'ok') logger.log('info', `pipeline ${pipeline.name}: scheduled verify: ${s.stream} equal (${counts})`, { pipeline: pipeline.name, stream: s.stream, phase: 'verify' });
      else logger.log('warn', `pipeline ${pipeline.name}: scheduled verify: ${s.stream} DRIFT (${counts}; ${s.missing.length} missing, ${s.extra.length} extra, ${s.changed.length} changed; tidemark verify lists the keys)`, { pipeline: pipeline.name, stream: s.stream, phase: 'verify' });
    }
    return report;
  } catch (error) {
    logger.log('error', `pipeline ${pipeline.name}: the scheduled verify failed: ${errorMessage(error)}`, { pipeline: pipeline.name, phase: 'verify' });
    return undefined;
  }
}
