import { describe, expect, it } from "vitest";
import { buildChartData } from "./chartData";
import { minMaxDownsample, minMaxIndices } from "./downsample";
import { Series } from "./series";

const steps = (n: number) => Array.from({ length: n }, (_, i) => i);

describe("minMaxIndices", () => {
  it("returns everything when there are no more points than pixels can show", () => {
    const xs = steps(50);
    const ys = xs.map((x) => x * 2);
    expect(minMaxIndices(xs, ys, 0, 49, 100)).toEqual(xs);
  });

  it("keeps a one-point spike and a one-point dip among a million flat points", () => {
    const n = 1_000_000;
    const xs = steps(n);
    const ys = xs.map(() => 1);
    ys[123_457] = 1_000; // divergence for one step
    ys[876_543] = -1_000;
    const { xs: dx, ys: dy } = minMaxDownsample({ xs, ys }, 0, n - 1, 800);
    expect(dx.length).toBeLessThanOrEqual(800 * 2 + 2);
    expect(dy).toContain(1_000);
    expect(dy).toContain(-1_000);
    expect(dx).toContain(123_457);
    expect(dx).toContain(876_543);
    expect(dx[0]).toBe(0);
    expect(dx[dx.length - 1]).toBe(n - 1);
    for (let i = 1; i < dx.length; i++) expect(dx[i]).toBeGreaterThan(dx[i - 1] as number);
  });

  it("keeps each bucket's min and max in their original order", () => {
    // Two buckets of 0..9 and 10..19 with 4 columns... a zigzag whose extremes are known.
    const xs = steps(40);
    const ys = xs.map((x) => (x % 10 === 3 ? 10 : x % 10 === 7 ? -10 : 0));
    const kept = minMaxIndices(xs, ys, 0, 39, 4);
    const values = kept.map((i) => ys[i]);
    // Every bucket of 10 steps contributes its max (at 3) before its min (at 7).
    for (const base of [0, 10, 20, 30]) {
      expect(kept).toContain(base + 3);
      expect(kept).toContain(base + 7);
    }
    expect(values.filter((v) => v === 10)).toHaveLength(4);
    expect([...kept].sort((a, b) => a - b)).toEqual(kept);
  });

  it("downsamples only the visible range, plus one point each side so lines reach the edges", () => {
    const xs = steps(10_000);
    const ys = xs.map((x) => Math.sin(x));
    const kept = minMaxIndices(xs, ys, 2_000, 3_000, 100);
    expect(kept[0]).toBe(1_999);
    expect(kept[kept.length - 1]).toBe(3_001);
    expect(kept.length).toBeLessThanOrEqual(202 + 2);
    expect(kept.every((i) => i >= 1_999 && i <= 3_001)).toBe(true);
  });

  it("keeps a NaN gap once per bucket, so a diverged stretch stays visible as a break", () => {
    const xs = steps(1_000);
    const ys: (number | null)[] = xs.map(() => 0.5);
    for (let i = 500; i < 520; i++) ys[i] = null;
    const kept = minMaxIndices(xs, ys, 0, 999, 50);
    expect(kept.some((i) => ys[i] === null)).toBe(true);
  });
});

describe("buildChartData", () => {
  it("aligns series with different steps on the union of their steps", () => {
    const a = new Series("chief:0", "loss");
    const b = new Series("chief:0", "val_loss");
    [10, 20, 30].forEach((s, i) => a.add(s, 3 - i, 0, 0));
    [20, 40].forEach((s, i) => b.add(s, 5 - i, 0, 0));
    const chart = buildChartData([a, b], 100, null);
    expect(chart.data[0]).toEqual([10, 20, 30, 40]);
    expect(chart.data[1]).toEqual([3, 2, 1, null]);
    expect(chart.data[2]).toEqual([null, 5, null, 4]);
    expect(chart.drawn).toBe(5);
    expect(chart.held).toBe(5);
  });

  it("draws about two points per pixel column however many are held", () => {
    const s = new Series("worker:0", "batch/loss", 100_000);
    for (let i = 0; i < 50_000; i++) s.add(i, i === 31_337 ? 99 : Math.random(), 0, 0);
    const chart = buildChartData([s], 500, null);
    expect(chart.held).toBe(50_000);
    expect(chart.drawn).toBeLessThanOrEqual(1_002);
    expect(chart.data[1]).toContain(99);
    const zoomed = buildChartData([s], 500, { min: 31_000, max: 32_000 });
    expect(zoomed.data[0][0]).toBeGreaterThanOrEqual(30_999);
    expect(zoomed.data[1]).toContain(99);
  });
});
