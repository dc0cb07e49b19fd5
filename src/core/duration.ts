/** Durations with explicit units (`500ms`, `30s`, `5m`, `2h`, `3d`): a bare number is refused, units are not guessed. */
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const DURATION_RE = /^(\d+)(ms|s|m|h|d)$/;

export function parseDuration(text: string): number | undefined {
  const m = DURATION_RE.exec(text.trim());
  if (!m) return undefined;
  return Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
}

export const DURATION_HINT = 'a duration with units such as 500ms, 30s, 5m, 2h or 3d';
