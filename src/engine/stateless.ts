/**
 * `state: none` (PyAirbyte's `state_cache=False`): no run starts from a stored position. A stream's entry keeps what
 * describes its table and its runs (schema, key, generation, run marks, metadata), never where its last read stopped.
 */
import type { PipelineState, StreamState } from '../core/types.js';

/** The state with `stream` as if it had never been read: its next read starts at the source's first row. */
export function withoutPosition(state: PipelineState, stream: string): PipelineState {
  const prior = state.streams[stream];
  if (prior === undefined) return state;
  // Everything that says where a read stopped or resumes; the build of a full stream starts afresh too.
  const { watermark: _w, safeMark: _s, resume: _r, resumeHigh: _h, build: _b, ...kept }: StreamState = prior;
  return { ...state, streams: { ...state.streams, [stream]: kept } };
}
