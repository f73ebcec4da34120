// Turning series into what uPlot draws: each series downsampled (min/max per pixel bucket)
// within the visible step range, then aligned on the union of their steps.
import { minMaxIndices } from "./downsample";
import type { Series } from "./series";

export interface ChartData {
  /** uPlot's AlignedData: [xs, ys1, ys2, ...]. */
  data: [number[], ...(number | null)[][]];
  /** Finite points drawn, over all series. */
  drawn: number;
  /** Points held, over all series. */
  held: number;
  xMin: number;
  xMax: number;
}

export interface ViewRange {
  min: number;
  max: number;
}

export function fullRange(series: readonly Series[]): ViewRange | null {
  let min = Infinity;
  let max = -Infinity;
  for (const s of series) {
    if (s.length === 0) continue;
    min = Math.min(min, s.steps[0] as number);
    max = Math.max(max, s.steps[s.length - 1] as number);
  }
  return min <= max ? { min, max } : null;
}

/** Align the series for drawing in `buckets` pixel columns over `view` (all of it when null). */
export function buildChartData(series: readonly Series[], buckets: number, view: ViewRange | null): ChartData {
  const range = view ?? fullRange(series);
  const held = series.reduce((n, s) => n + s.length, 0);
  if (!range) return { data: [[], ...series.map(() => [])], drawn: 0, held, xMin: 0, xMax: 0 };
  const picked = series.map((s) => minMaxIndices(s.steps, s.values, range.min, range.max, buckets));
  // Union of the picked steps, ascending.
  const xs: number[] = [];
  {
    const all: number[] = [];
    picked.forEach((indices, k) => {
      const steps = (series[k] as Series).steps;
      for (const i of indices) all.push(steps[i] as number);
    });
    all.sort((a, b) => a - b);
    for (const x of all) if (xs.length === 0 || xs[xs.length - 1] !== x) xs.push(x);
  }
  const position = new Map<number, number>();
  xs.forEach((x, i) => position.set(x, i));
  let drawn = 0;
  const ys = picked.map((indices, k) => {
    const s = series[k] as Series;
    const column: (number | null)[] = new Array<number | null>(xs.length).fill(null);
    for (const i of indices) {
      const value = s.values[i];
      const at = position.get(s.steps[i] as number);
      if (at === undefined || value === null || value === undefined || !Number.isFinite(value)) continue;
      column[at] = value;
      drawn += 1;
    }
    return column;
  });
  return { data: [xs, ...ys], drawn, held, xMin: range.min, xMax: range.max };
}
