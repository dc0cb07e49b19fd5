import { describe, expect, it } from 'vitest';
import { exportAirbyteState, importAirbyteState } from '../../src/engine/airbyte-state.js';
import type { PipelineState } from '../../src/core/types.js';

/**
 * A LEGACY state is the whole connector's: a connector reading one stream writes back the parts of the others as it
 * was given them. Read stream by stream, each stream's stored state holds its own part new and the others' old.
 */
describe('LEGACY Airbyte state across streams', () => {
  it('state export keeps each stream its own part, not the last read stream\'s copy of it', () => {
    const streams = [
      { name: 'users', strategy: 'incremental' as const, primaryKey: ['id'] },
      { name: 'purchases', strategy: 'incremental' as const, primaryKey: ['id'] },
    ];
    const empty: PipelineState = { pipeline: 'p', version: 0, streams: {} };
    // Imported once (every stream gets the whole object), then the users read, then the purchases read.
    const imported = importAirbyteState({ users: { cutoff: '2024-01-01' }, purchases: { cutoff: '2024-01-01' }, seed: 7 }, streams, empty);
    const afterUsers: PipelineState = {
      ...imported,
      streams: { ...imported.streams, users: { ...imported.streams.users!, resume: { users: { cutoff: '2024-06-30' }, purchases: { cutoff: '2024-01-01' }, seed: 7 }, updatedAt: '2024-07-01T00:00:00.000Z' } },
    };
    const afterBoth: PipelineState = {
      ...afterUsers,
      streams: { ...afterUsers.streams, purchases: { ...afterUsers.streams.purchases!, resume: { users: { cutoff: '2024-01-01' }, purchases: { cutoff: '2024-06-29' }, seed: 7 }, updatedAt: '2024-07-01T00:00:01.000Z' } },
    };
    expect(exportAirbyteState(afterBoth)).toEqual({ users: { cutoff: '2024-06-30' }, purchases: { cutoff: '2024-06-29' }, seed: 7 });
  });
});
