/**
 * The dashboard's actions. Each goes through the same library call as its CLI command (`tidemark run`,
 * `tidemark state reset`, `tidemark ledger reload|forget`), so it takes the same lease and commits by the same
 * rule; the gate keeps this process's reads off the destination while an action has it open.
 */
import { UsageError, run, stateCommands, type PipelineConfig, type RunResult } from '../index.js';
import { DestinationGate, destinationKey } from './dashboard-data.js';
import type { LedgerView } from './ledger-view.js';

export type ActionName = 'run' | 'reset' | 'ledger-reload' | 'ledger-forget';

export interface ActionRequest {
  readonly stream?: string;
  readonly partition?: string;
}

export type ActionOutcome =
  | { readonly action: 'run'; readonly result: RunResult }
  | { readonly action: 'reset'; readonly version: number }
  | { readonly action: 'ledger-reload' | 'ledger-forget'; readonly partition: string };

function streamOf(pipeline: PipelineConfig, request: ActionRequest, required: boolean): string | undefined {
  const stream = request.stream;
  if (stream === undefined || stream === '') {
    if (required) throw new UsageError('this action needs a stream');
    return undefined;
  }
  if (!pipeline.streams.some((s) => s.name === stream)) throw new UsageError(`pipeline ${pipeline.name} has no stream ${stream}`);
  return stream;
}

/** Which ledger actions the ledger view supports (the UI offers only these). */
export function ledgerActions(ledger: LedgerView): readonly ActionName[] {
  return [...(ledger.reload ? (['ledger-reload'] as const) : []), ...(ledger.forget ? (['ledger-forget'] as const) : [])];
}

export async function performAction(
  gate: DestinationGate,
  ledger: LedgerView,
  pipeline: PipelineConfig,
  action: ActionName,
  request: ActionRequest,
): Promise<ActionOutcome> {
  const key = destinationKey(pipeline);
  switch (action) {
    case 'run': {
      const stream = streamOf(pipeline, request, false);
      const result = await gate.act(key, `a run of ${pipeline.name}`, () => run(pipeline, stream !== undefined ? { streams: [stream] } : {}));
      return { action, result };
    }
    case 'reset': {
      const stream = streamOf(pipeline, request, true)!;
      const next = await gate.act(key, `a state reset of ${pipeline.name}.${stream}`, () => stateCommands(pipeline).reset(stream));
      return { action, version: next.version };
    }
    case 'ledger-reload':
    case 'ledger-forget': {
      const stream = streamOf(pipeline, request, true)!;
      const partition = request.partition;
      if (typeof partition !== 'string' || partition === '') throw new UsageError('this action needs a partition');
      const fn = action === 'ledger-reload' ? ledger.reload : ledger.forget;
      if (!fn) throw new UsageError(`${action.replace('-', ' ')} is not available: this build has no ledger API yet`);
      await gate.act(key, `${action.replace('-', ' ')} of ${pipeline.name}.${stream} ${partition}`, () => fn.call(ledger, pipeline, stream, partition));
      return { action, partition };
    }
  }
}
