/**
 * Doubles that stress a float's shortest round-trip text: every power of ten and of two with their neighbours, small
 * multiples of powers of ten (the halfway points between large doubles, where engines disagree: 1e23, 5e22), the
 * extremes, and seeded random bit patterns. Each with its canonical text (`String(x)`, `-0` kept).
 */
const view = new DataView(new ArrayBuffer(8));

/** The double `steps` representable values above (below, if negative) the positive double `x`. */
export function nextDouble(x: number, steps: number): number {
  view.setFloat64(0, x);
  view.setBigUint64(0, view.getBigUint64(0) + BigInt(steps));
  return view.getFloat64(0);
}

/** A small deterministic generator (mulberry32), so a failure reproduces. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function edgeDoubles(options: { random?: number; multiples?: readonly number[] } = {}): number[] {
  const out = new Set<number>([0.1, 0.2, 0.3, 0.1 + 0.2, 1e21, 1e-7, 1e-6, 5e-324, 1.7976931348623157e308, 2.2250738585072014e-308, 4.35, 2 / 3, 100, 1e15, 1e16, 1e23, 9007199254740993]);
  const add = (x: number) => {
    if (Number.isFinite(x) && x > 0) out.add(x);
  };
  for (let n = -324; n <= 308; n += 1) {
    for (const a of options.multiples ?? [1, 2, 3, 5, 7, 9, 12, 25, 99, 12345]) {
      const x = Number(`${a}e${n}`);
      add(x);
      if (x > 0 && Number.isFinite(x)) {
        add(nextDouble(x, 1));
        if (x > 5e-324) add(nextDouble(x, -1));
      }
    }
  }
  for (let e = -1074; e <= 1023; e += 1) {
    const x = 2 ** e;
    add(x);
    add(nextDouble(x, 1));
    if (x > 5e-324) add(nextDouble(x, -1));
  }
  const random = seeded(33);
  for (let i = 0; i < (options.random ?? 2000); i += 1) {
    view.setUint32(0, Math.floor(random() * 0x7fefffff));
    view.setUint32(4, Math.floor(random() * 2 ** 32));
    add(view.getFloat64(0));
  }
  const positive = [...out];
  return [...positive, ...positive.filter((_, i) => i % 7 === 0).map((x) => -x), -0];
}

/** The canonical text `tidemark verify` hashes for a double: `String(x)`, but `-0` for negative zero. */
export function doubleText(x: number): string {
  return Object.is(x, -0) ? '-0' : String(x);
}
