/**
 * What `tidemark init` proposes for each table (a cursor, a key, a strategy, and why), and the commented pipeline
 * YAML it writes from that. Pure: the catalog comes in, text goes out.
 */
import type { CatalogColumn, CatalogTable } from './catalog.js';

export interface StreamProposal {
  /** As written in `table:` (`public.orders`, or `orders`). */
  readonly table: string;
  /** Set only when two tables would otherwise give the same stream name. */
  readonly name?: string;
  readonly primaryKey: readonly string[];
  readonly cursor?: string;
  readonly strategy: 'incremental' | 'full';
  /** One line for the YAML comment and the confirmation list. */
  readonly why: string;
}

/** Names of update timestamps, most telling first; compared without case, `_` or `-`. */
const UPDATE_NAMES = ['updatedat', 'modifiedat', 'lastmodified', 'lastmodifiedat', 'modified', 'updated', 'lastupdated', 'lastupdate', 'updatedon', 'modifiedon', 'changedat', 'lastchanged'];

const normalized = (name: string): string => name.toLowerCase().replace(/[_\-\s]/g, '');

/** The column whose growth marks changed rows: an update timestamp by its name, else none. */
function updateTimestamp(columns: readonly CatalogColumn[]): CatalogColumn | undefined {
  const candidates = columns.filter((c) => c.kind === 'timestamp' && UPDATE_NAMES.includes(normalized(c.name)));
  return candidates.sort((a, b) => UPDATE_NAMES.indexOf(normalized(a.name)) - UPDATE_NAMES.indexOf(normalized(b.name)))[0];
}

function proposeStream(table: CatalogTable): StreamProposal {
  const qualified = table.schema !== undefined ? `${table.schema}.${table.name}` : table.name;
  const base = { table: qualified, primaryKey: table.primaryKey };
  const keyText = table.primaryKey.length > 0 ? `, key (${table.primaryKey.join(', ')}) from the catalog` : ', no primary key: rows are appended';
  const stamp = updateTimestamp(table.columns);
  if (stamp !== undefined) return { ...base, cursor: stamp.name, strategy: 'incremental', why: `${stamp.name} (${stamp.type}) marks updated rows${keyText}` };
  const serial = table.primaryKey.length === 1 ? table.columns.find((c) => c.name === table.primaryKey[0] && c.kind === 'integer' && c.increasing) : undefined;
  if (serial !== undefined) {
    return { ...base, cursor: serial.name, strategy: 'incremental', why: `no update timestamp; ${serial.name} is an increasing key, so new rows are read but updates to old ones are not` };
  }
  return { ...base, strategy: 'full', why: `no update timestamp or increasing key: read in full every run and swapped in atomically${table.primaryKey.length > 0 ? keyText : ''}` };
}

/**
 * One proposal per table. A table name two schemas share keeps its plain stream name in `public` (the default
 * schema) and becomes `<schema>_<table>` elsewhere.
 */
export function proposeStreams(tables: readonly CatalogTable[]): StreamProposal[] {
  const count = new Map<string, number>();
  for (const t of tables) count.set(t.name, (count.get(t.name) ?? 0) + 1);
  return tables.map((t) => {
    const proposal = proposeStream(t);
    const shared = (count.get(t.name) ?? 0) > 1 && t.schema !== undefined && t.schema !== 'public';
    return shared ? { ...proposal, name: usableName(`${t.schema}_${t.name}`) } : proposal;
  });
}

/** A stream or pipeline name tidemark accepts: letters, digits, `_`, `-`, `.`. */
export function usableName(text: string): string {
  const name = text.replace(/[^A-Za-z0-9_.-]+/g, '_').replace(/^[.-]+/, '').replace(/\.{2,}/g, '.').slice(0, 128);
  return name.length > 0 ? name : 'pipeline';
}

export interface PipelineText {
  readonly name: string;
  /** Lines of the `source:` section below `source:` (already indented). */
  readonly source: readonly string[];
  readonly destination: readonly string[];
  /** What the source is, for the header comment (never with a password). */
  readonly described: string;
  readonly streams: readonly StreamProposal[];
  /** What the `# yaml-language-server: $schema=` line points at. */
  readonly schemaRef: string;
}

/** A YAML scalar: plain when that reads back as the same string, quoted otherwise. */
export function scalar(text: string): string {
  return /^[A-Za-z_./][A-Za-z0-9_./@:+-]*$/.test(text) && !/^(true|false|null|yes|no|on|off|~)$/i.test(text) && !text.includes(': ') ? text : JSON.stringify(text);
}

export function pipelineYaml(p: PipelineText): string {
  const streams = p.streams.flatMap((s) => [
    `  # ${s.why}`,
    `  - table: ${scalar(s.table)}`,
    ...(s.name !== undefined ? [`    name: ${scalar(s.name)}`] : []),
    ...(s.primaryKey.length > 0 ? [`    primary_key: [${s.primaryKey.map(scalar).join(', ')}]`] : []),
    ...(s.cursor !== undefined ? [`    cursor: ${scalar(s.cursor)}`] : []),
    ...(s.strategy === 'full' ? ['    strategy: full'] : []),
  ]);
  return [
    `# yaml-language-server: $schema=${p.schemaRef}`,
    `# Written by tidemark init from ${p.described}, one stream per table.`,
    '# An incremental stream reads what its cursor says is new or changed; it does not carry deletes (a full',
    '# stream, strategy: full, reads everything every run). Check this file with tidemark validate and',
    '# tidemark plan; every key is described in docs/config-reference.md.',
    `name: ${scalar(p.name)}`,
    'source:',
    ...p.source,
    'streams:',
    ...streams,
    'destination:',
    ...p.destination,
    '',
  ].join('\n');
}
