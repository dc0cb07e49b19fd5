/** The coverage table printed after the matrix: cells run / passed / refused / known bugs, and failpoints that never fired per path. */
import type { CellSpec, Failpoint } from './types.js';

export type CellStatus = 'passed' | 'refused' | 'failed' | 'known-bug' | 'skipped' | 'not-sampled';

export interface CoverageEntry {
  readonly cell: CellSpec;
  status: CellStatus;
  reason?: string;
  notFired?: Failpoint;
  ms?: number;
}

export function coverageTable(entries: readonly CoverageEntry[], seed: number, mode: string, wallMs: number): string {
  const paths = new Map<string, Record<CellStatus | 'run', number>>();
  const notFired = new Map<string, Set<string>>();
  for (const e of entries) {
    const path = `${e.cell.source} → ${e.cell.destination}`;
    const row = paths.get(path) ?? { run: 0, passed: 0, refused: 0, failed: 0, 'known-bug': 0, skipped: 0, 'not-sampled': 0 };
    row[e.status] += 1;
    if (e.status === 'passed' || e.status === 'refused' || e.status === 'failed' || e.status === 'known-bug') row.run += 1;
    paths.set(path, row);
    if (e.notFired) notFired.set(path, (notFired.get(path) ?? new Set()).add(`${e.notFired} (${e.cell.write})`));
  }
  const header = ['path', 'run', 'passed', 'refused', 'failed', 'known-bug', 'skipped', 'not-sampled', 'failpoints that never fired'];
  // A sample touches few paths: the ones it did not run are counted in one line rather than listed.
  const idle = [...paths].filter(([, r]) => r.run === 0).length;
  const lines = [...paths].filter(([, r]) => r.run > 0).sort(([a], [b]) => a.localeCompare(b)).map(([path, r]) => [path, r.run, r.passed, r.refused, r.failed, r['known-bug'], r.skipped, r['not-sampled'], [...(notFired.get(path) ?? [])].join(' ')]);
  const total = entries.reduce((t, e) => ({ ...t, [e.status]: (t[e.status] ?? 0) + 1 }), {} as Record<string, number>);
  const run = (total.passed ?? 0) + (total.refused ?? 0) + (total.failed ?? 0) + (total['known-bug'] ?? 0);
  if (idle > 0) lines.push([`(${idle} paths not run)`, 0, 0, 0, 0, 0, '', '', '']);
  lines.push(['total', run, total.passed ?? 0, total.refused ?? 0, total.failed ?? 0, total['known-bug'] ?? 0, total.skipped ?? 0, total['not-sampled'] ?? 0, '']);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => String(l[i]).length)));
  const fmt = (cells: readonly unknown[]) => cells.map((c, i) => String(c).padEnd(widths[i]!)).join(' | ');
  const skipped = [...new Set(entries.filter((e) => e.status === 'skipped').map((e) => `  - ${e.reason}`))];
  const failed = entries.filter((e) => e.status === 'failed' || e.status === 'known-bug').map((e) => `  - ${e.status}: ${e.cell.source} → ${e.cell.destination} · ${e.cell.write} · ${e.cell.fault.kind === 'kill' ? `kill@${e.cell.fault.point}` : e.cell.fault.kind}: ${(e.reason ?? '').slice(0, 300)}`);
  return [
    `conformance matrix (${mode}, TIDEMARK_MATRIX_SEED=${seed}, ${(wallMs / 1000).toFixed(1)} s)`,
    fmt(header),
    widths.map((w) => '-'.repeat(w)).join('-|-'),
    ...lines.map(fmt),
    ...(skipped.length ? ['skipped combinations (not valid by design of the matrix):', ...skipped] : []),
    ...(failed.length ? ['failing cells:', ...failed] : []),
  ].join('\n');
}
