// Downsampling for drawing: per pixel-wide bucket of x, keep the points with the smallest and
// the largest y (in their original order), plus the first and last point, so that spikes and
// divergence stay visible however many points there are.

export interface XY {
  xs: number[];
  ys: (number | null)[];
}

/** Indices to keep from `ys` (x sorted ascending) when drawing `buckets` columns over
 * [xMin, xMax]. Points outside the range are dropped, except one on each side so that a
 * line runs to the edge of the view. Null values (NaN) are kept once per bucket as a gap. */
export function minMaxIndices(
  xs: readonly number[],
  ys: readonly (number | null)[],
  xMin: number,
  xMax: number,
  buckets: number,
): number[] {
  const n = xs.length;
  if (n === 0) return [];
  let lo = lowerBound(xs, xMin);
  let hi = upperBound(xs, xMax); // exclusive
  if (lo > 0) lo -= 1;
  if (hi < n) hi += 1;
  const count = hi - lo;
  buckets = Math.max(1, Math.floor(buckets));
  if (count <= buckets * 2 + 2) return range(lo, hi);
  const span = xMax > xMin ? xMax - xMin : 1;
  const keep: number[] = [];
  let bucket = -1;
  let minI = -1;
  let maxI = -1;
  let gapI = -1;
  const flush = () => {
    const chosen = [minI, maxI, gapI].filter((i) => i >= 0);
    chosen.sort((a, b) => a - b);
    for (const i of chosen) if (keep[keep.length - 1] !== i) keep.push(i);
  };
  for (let i = lo; i < hi; i++) {
    const x = xs[i] as number;
    const b = Math.min(buckets - 1, Math.max(0, Math.floor(((x - xMin) / span) * buckets)));
    if (b !== bucket) {
      if (bucket !== -1) flush();
      bucket = b;
      minI = maxI = gapI = -1;
    }
    const y = ys[i];
    if (y === null || y === undefined || Number.isNaN(y)) {
      if (gapI < 0) gapI = i;
      continue;
    }
    if (minI < 0 || y < (ys[minI] as number)) minI = i;
    if (maxI < 0 || y > (ys[maxI] as number)) maxI = i;
  }
  if (bucket !== -1) flush();
  if (keep[0] !== lo) keep.unshift(lo);
  if (keep[keep.length - 1] !== hi - 1) keep.push(hi - 1);
  return keep;
}

/** The kept points themselves. */
export function minMaxDownsample(
  data: XY,
  xMin: number,
  xMax: number,
  buckets: number,
): XY & { indices: number[] } {
  const indices = minMaxIndices(data.xs, data.ys, xMin, xMax, buckets);
  return {
    xs: indices.map((i) => data.xs[i] as number),
    ys: indices.map((i) => data.ys[i] ?? null),
    indices,
  };
}

function range(lo: number, hi: number): number[] {
  const out: number[] = [];
  for (let i = lo; i < hi; i++) out.push(i);
  return out;
}

/** First index with xs[i] >= x. */
export function lowerBound(xs: readonly number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((xs[mid] as number) < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** First index with xs[i] > x. */
export function upperBound(xs: readonly number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((xs[mid] as number) <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
