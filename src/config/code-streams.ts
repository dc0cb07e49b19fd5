/**
 * The streams of a code source as pipeline stream entries: name, key, cursor and strategy come from the stream
 * definitions (`defineStream`), the load settings (write, checkpoint_rows, lookback, …) from the pipeline's
 * `streams:` entries, which may leave out any stream. Both are then checked by the same schema and rules as a file.
 */
import type { AnyCodeStream, CodeSource } from '../core/code-source.js';
import type { FilesStreamSpec } from '../core/connector.js';
import { ConfigError } from '../core/errors.js';
import type { SourceConfig } from './schema.js';

/** A stream entry as written (YAML or object), before validation. */
export type StreamEntry = { readonly name?: string | undefined } & Readonly<Record<string, unknown>>;

const DEFAULT_PARTITION_COLUMN = '_tidemark_partition';

function keyOf(stream: AnyCodeStream): string[] {
  return stream.primaryKey === undefined ? [] : typeof stream.primaryKey === 'string' ? [stream.primaryKey] : [...stream.primaryKey];
}

/**
 * One entry per stream the pipeline loads: every stream of the source when `given` is absent, else the entries
 * given (each naming a stream of the source), with key, cursor and strategy filled in from the definitions.
 */
export function codeStreamEntries(source: CodeSource, given: readonly StreamEntry[] | undefined, where: string): Record<string, unknown>[] {
  const byName = new Map(source.streams.map((s) => [s.name, s]));
  const entries: readonly StreamEntry[] = given ?? source.streams.map((s) => ({ name: s.name }));
  return entries.map((entry, i) => {
    const at = (field: string) => `${where}: streams[${i}].${field}`;
    if (typeof entry !== 'object' || entry === null) return entry;
    if (entry.name === undefined) throw new ConfigError(`${at('name')}: a stream of a code source names one of its streams (${[...byName.keys()].join(', ')})`);
    const stream = byName.get(entry.name);
    if (stream === undefined) throw new ConfigError(`${at('name')}: the code source has no stream ${JSON.stringify(entry.name)} (streams: ${[...byName.keys()].join(', ')})`);
    const key = keyOf(stream);
    const cursor = stream.kind === 'stream' ? stream.cursor : undefined;
    const givenKey = entry.primary_key === undefined ? undefined : [entry.primary_key].flat();
    if (givenKey !== undefined && givenKey.join('\u0000') !== key.join('\u0000')) {
      throw new ConfigError(`${at('primary_key')}: the key of stream ${stream.name} is declared by its definition (${key.join(', ') || 'none'}); leave primary_key out here`);
    }
    if (entry.cursor !== undefined && entry.cursor !== cursor) {
      throw new ConfigError(`${at('cursor')}: the cursor of stream ${stream.name} is declared by its definition (${cursor ?? 'none'}); leave cursor out here`);
    }
    const partitioned = stream.kind === 'partitioned';
    if (entry.strategy !== undefined && (entry.strategy === 'partitioned') !== partitioned) {
      throw new ConfigError(
        partitioned
          ? `${at('strategy')}: stream ${stream.name} lists partitions (definePartitionedStream), so its strategy is partitioned`
          : `${at('strategy')}: stream ${stream.name} is read by one generator (defineStream); strategy ${String(entry.strategy)} needs definePartitionedStream`,
      );
    }
    return {
      ...entry,
      ...(key.length > 0 ? { primary_key: key } : {}),
      ...(cursor !== undefined ? { cursor } : {}),
      ...(partitioned ? { strategy: 'partitioned' } : {}),
    };
  });
}

/** The partition settings the engine's ledger loader reads, for a partitioned code stream. */
export function codePartitionSpec(source: SourceConfig, stream: string): FilesStreamSpec {
  const found = source.type === 'code' ? source.definition?.streams.find((s) => s.name === stream) : undefined;
  const column = found?.kind === 'partitioned' ? found.partitionColumn : undefined;
  return { pattern: `the partitions listed by stream ${stream}`, format: 'jsonl', partitionColumn: column ?? DEFAULT_PARTITION_COLUMN, changeDetection: 'stat' };
}
