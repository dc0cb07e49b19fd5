/** The public library API of tidemark. The CLI uses only what is exported here. */
export { loadPipeline, parsePipeline } from './config/load.js';
export type { PipelineConfig, StreamConfig } from './config/load.js';
export { pipelineJsonSchema } from './config/schema.js';
export { run, emptyState } from './engine/run.js';
export type { RunOptions } from './engine/run.js';
export { planPipeline } from './engine/plan-report.js';
export type { StreamPlanReport } from './engine/plan-report.js';
export { openStateStore, stateCommands } from './engine/state-admin.js';
export { openDestination, openSource } from './registry/index.js';
export * from './core/errors.js';
export type * from './core/types.js';
export type * from './core/connector.js';
export { parseTyped, canonicalDecimal, canonicalTimestamp } from './core/values.js';
export { registerSecret, redact } from './core/logger.js';
