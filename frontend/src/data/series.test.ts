import { describe, expect, it } from "vitest";
import type { Columns, MetricsFrame } from "../api/types";
import { Series, SeriesStore } from "./series";

function frame(task: string, attempt: number, series: Record<string, Columns>): Pick<MetricsFrame, "task" | "attempt" | "series"> {
  return { task, attempt, series };
}

const cols = (steps: number[], values: (number | null)[]): Columns => [steps, values, steps.map((s) => 1_000 + s)];

describe("SeriesStore.apply", () => {
  it("merges several frames of one attempt into one ordered series per task and name", () => {
    const store = new SeriesStore();
    store.apply(frame("chief:0", 0, { loss: cols([20, 40], [2.0, 1.5]), accuracy: cols([20, 40], [0.3, 0.5]) }));
    store.apply(frame("chief:0", 0, { loss: cols([60], [1.1]) }));
    store.apply(frame("worker:0", 0, { loss: cols([10], [9]) }));

    const loss = store.get("chief:0", "loss");
    expect(loss?.steps).toEqual([20, 40, 60]);
    expect(loss?.values).toEqual([2.0, 1.5, 1.1]);
    expect(loss?.walls).toEqual([1020, 1040, 1060]);
    expect(store.get("chief:0", "accuracy")?.values).toEqual([0.3, 0.5]);
    expect(store.get("worker:0", "loss")?.steps).toEqual([10]);
    expect(store.all()).toHaveLength(3);
    expect(store.find((name) => name === "loss").map((s) => s.task).sort()).toEqual(["chief:0", "worker:0"]);
  });

  it("keeps steps ordered when frames arrive out of order, and NaN (null) as a gap", () => {
    const store = new SeriesStore();
    store.apply(frame("chief:0", 0, { loss: cols([50, 60], [1, null]) }));
    store.apply(frame("chief:0", 0, { loss: cols([10, 30], [3, 2]) }));
    store.apply(frame("chief:0", 0, { loss: cols([55], [0.5]) }));
    const loss = store.get("chief:0", "loss") as Series;
    expect(loss.steps).toEqual([10, 30, 50, 55, 60]);
    expect(loss.values).toEqual([3, 2, 1, 0.5, null]);
    expect(loss.latest()).toBe(0.5); // the newest value that is a number
  });

  it("lets a newer attempt's value win at a step both attempts reported", () => {
    // A chief that restarts resumes from its backup and reports steps 40..60 again.
    const store = new SeriesStore();
    store.apply(frame("chief:0", 0, { loss: cols([20, 40, 60], [2.0, 1.5, 1.2]) }));
    store.apply(frame("chief:0", 1, { loss: cols([40, 60, 80], [1.4, 1.0, 0.8]) }));
    // A late frame of the older attempt does not overwrite what the newer one said.
    store.apply(frame("chief:0", 0, { loss: cols([60], [9.9]) }));
    const loss = store.get("chief:0", "loss") as Series;
    expect(loss.steps).toEqual([20, 40, 60, 80]);
    expect(loss.values).toEqual([2.0, 1.4, 1.0, 0.8]);
    expect(loss.attempts).toEqual([0, 1, 1, 1]);
    for (let i = 1; i < loss.steps.length; i++) expect(loss.steps[i]).toBeGreaterThan(loss.steps[i - 1] as number);
  });

  it("bumps versions only for what changed", () => {
    const store = new SeriesStore();
    store.apply(frame("chief:0", 0, { loss: cols([1], [1]), accuracy: cols([1], [0.1]) }));
    const loss = store.get("chief:0", "loss") as Series;
    const accuracy = store.get("chief:0", "accuracy") as Series;
    const [lv, av, sv] = [loss.version, accuracy.version, store.version];
    store.apply(frame("chief:0", 0, { loss: cols([2], [0.9]) }));
    expect(loss.version).toBeGreaterThan(lv);
    expect(accuracy.version).toBe(av);
    expect(store.version).toBe(sv + 1);
  });
});

describe("Series bounds", () => {
  it("holds at most maxPoints however many arrive, and keeps the first, last and extreme points", () => {
    const max = 200;
    const series = new Series("chief:0", "batch/loss", max);
    const total = 10_000;
    let longest = 0;
    for (let step = 1; step <= total; step++) {
      // A smooth curve with one spike at step 4321 and one dip at 7777.
      const value = step === 4321 ? 50 : step === 7777 ? -50 : Math.sin(step / 300);
      series.add(step, value, step, 0);
      longest = Math.max(longest, series.length);
    }
    expect(longest).toBe(max);
    expect(series.received).toBe(total);
    expect(series.length).toBeGreaterThan(max / 4);
    expect(series.steps[0]).toBe(1);
    expect(series.steps[series.length - 1]).toBe(total);
    expect(series.values).toContain(50);
    expect(series.values).toContain(-50);
    expect(series.steps).toContain(4321);
    for (let i = 1; i < series.length; i++) expect(series.steps[i]).toBeGreaterThan(series.steps[i - 1] as number);
    // The columns stay aligned with each other.
    expect(series.walls).toEqual(series.steps);
    expect(series.attempts.length).toBe(series.length);
  });

  it("is bounded through the store as well", () => {
    const store = new SeriesStore(100);
    for (let k = 0; k < 50; k++) {
      const steps = Array.from({ length: 40 }, (_, i) => k * 40 + i + 1);
      store.apply(frame("worker:0", k < 25 ? 0 : 1, { "batch/loss": cols(steps, steps.map((s) => 1 / s)) }));
    }
    const series = store.get("worker:0", "batch/loss") as Series;
    expect(series.length).toBeLessThanOrEqual(100);
    expect(series.received).toBe(2_000);
    expect(series.steps[series.length - 1]).toBe(2_000);
  });
});
