import { it } from 'vitest';

/**
 * Failpoint sweeps that repeat over several combinations (destination × write, …). `npm test` runs each point in
 * `copies` of the combinations, rotating, so that every point still fires and every combination still crashes at
 * least once; `TIDEMARK_SWEEP=all` runs every point in every combination.
 */
export const FULL_SWEEP = process.env.TIDEMARK_SWEEP === 'all';

/** The points that combination number `combination` (of `combinations`) runs. */
export function sweepPoints<T>(points: readonly T[], combination: number, combinations: number, copies = 2): T[] {
  if (FULL_SWEEP || copies >= combinations) return [...points];
  const mine = points.filter((_, p) => (((p - combination) % combinations) + combinations) % combinations < copies);
  return mine.length > 0 ? mine : [points[combination % points.length]!];
}

/**
 * For a describe block repeated over combinations whose tests are written out one by one: `sampled(i)` is `it` for
 * the tests (numbered 0…tests-1) that this combination runs in `npm test`, `it.skip` for the others.
 */
export function sweepTests(tests: number, combination: number, combinations: number, copies = 2): (test: number) => typeof it.skip {
  const mine = new Set(sweepPoints([...Array(tests).keys()], combination, combinations, copies));
  return (test) => (mine.has(test) ? it : it.skip);
}
