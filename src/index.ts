/** The public library API of tidemark. The CLI uses only what is exported here. */
export { loadPipeline } from './config/load.js';
export { bucketAccessOf, parsePipeline, parseStateSpec } from './config/parse.js';
export type { BucketAccess } from './config/parse.js';
export type { PipelineConfig, StreamConfig } from './config/load.js';
export { pipelineJsonSchema } from './config/json-schema.js';
export { loadPipelineOrTarget, loadTargetPipeline } from './config/load.js';
export { runTarget } from './engine/singer-target.js';
export type { TargetOptions, TargetResult } from './engine/singer-target.js';
export { run, emptyState } from './engine/run.js';
export type { RunOptions } from './engine/run.js';
export { catalogProblems, planPipeline } from './engine/plan-report.js';
export type { OfferedStream } from './core/connector.js';
export { isSyncPosition } from './core/connector.js';
export { discoverStreams, type DiscoveredStream } from './engine/discover.js';
export { checkSource } from './engine/source-check.js';
export type { SourceCheck } from './engine/source-check.js';
export type { SchemaPlanReport, StreamPlanReport } from './engine/plan-report.js';
export { classifyType, diffSchemas, describeChange, schemaVersions } from './core/schema-diff.js';
export type { SchemaChange, SchemaPolicy, SchemaVersionChange, TypeChange } from './core/schema-diff.js';
export { deleteStoredPipeline, listStoredPipelines, openStateStore, stateCommands, storedPipeline } from './engine/state-admin.js';
export type { ShownState, StoredPipeline } from './engine/state-admin.js';
export { ledgerCommands } from './engine/ledger-admin.js';
export { verifyPipeline } from './engine/verify.js';
export { verifyWhenDue, verifyDue } from './engine/verify-schedule.js';
export type { KeyValues, StreamVerify, VerifyOptions, VerifyReport } from './engine/verify.js';
export { compactLake, parseByteSize } from './engine/lake-compact.js';
export type { CompactLakeOptions, CompactResult } from './engine/lake-compact.js';
export type { LedgerCheck, LedgerGridEntry, LedgerListEntry, PartitionState } from './engine/ledger-admin.js';
export type { MigrateResult } from './engine/state-admin.js';
export { reconcile } from './engine/state-sync.js';
export type { Reconciled, ReconcileAction, StateDifference } from './engine/state-sync.js';
export { createStateStore } from './registry/index.js';
export type { ExternalStateStore } from './state/state-store.js';
export { CorruptStateError } from './state/state-store.js';
export type { StateConfig, StateStoreConfig, FilesDestinationConfig, BucketStateConfig, LockStoreConfig } from './config/schema.js';
export type { LakeManifest, LakeStateDocument, LakeFile, LakeTable } from './destinations/files/lake-layout.js';
export type { OpenedStateStore } from './engine/state-admin.js';
export { openDestination, openSource, leaseDirectory, destinationProblems } from './registry/index.js';
export type { OpenDestinationOptions } from './registry/index.js';
export { Scheduler } from './scheduler/scheduler.js';
export type { OnceResult, SchedulerOptions } from './scheduler/scheduler.js';
export { TickStore, TICK_FILE_NAME } from './scheduler/tick-store.js';
export { InProcessDispatcher, QueueDispatcher } from './scheduler/dispatch.js';
export type { Dispatcher, DispatchOutcome } from './scheduler/dispatch.js';
export { PipelineQueue } from './queue/pipeline-queue.js';
export type { EnqueueOptions, EnqueuedJob, QueuedJob } from './queue/pipeline-queue.js';
export { PipelineWorker } from './queue/pipeline-worker.js';
export type { PipelineWorkerOptions } from './queue/pipeline-worker.js';
export { queueTarget, redactUrl, DEFAULT_QUEUE_NAME, DEFAULT_QUEUE_PREFIX } from './queue/queue-connection.js';
export type { QueueTarget } from './queue/queue-connection.js';
export type { PipelineJobData, PipelineJobResult } from './queue/pipeline-job.js';
export * from './core/errors.js';
export type * from './core/types.js';
export type * from './core/connector.js';
export { parseTyped, canonicalDecimal, canonicalTimestamp } from './core/values.js';
export { registerSecret, redact } from './core/logger.js';
export { readLockHolder, type LockHolder } from './ui/lock-holder.js';
export { codeSource, defineStream, definePartitionedStream, resumeAt } from './core/code-source.js';
export type {
  CodeColumnType,
  CodePartition,
  CodeReadContext,
  CodeRecord,
  CodeSource,
  CodeStream,
  CodeStreamOptions,
  CodeYield,
  PartitionedCodeStream,
  PartitionedCodeStreamOptions,
  ResumePoint,
} from './core/code-source.js';
export { definePipeline } from './config/code-pipeline.js';
export type { DefinePipelineOptions, PipelineInput, StreamInput } from './config/code-pipeline.js';
export { readTable } from './engine/read-table.js';
export type { ReadTableOptions, TableRow } from './engine/read-table.js';
