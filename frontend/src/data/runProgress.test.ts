import { describe, expect, it } from "vitest";
import type { JobProgress } from "../api/types";
import { cellLine, eta, percentDone, progressLine, progressView, stepRate } from "./runProgress";

const progress = (fields: Partial<JobProgress>): JobProgress => ({ step: 1520, updated_at: "2026-11-24T01:00:00Z", ...fields });

describe("a running job's progress", () => {
  it("gives the percent rounded down and capped", () => {
    expect(percentDone(0, 4000)).toBe(0);
    expect(percentDone(1520, 4000)).toBe(38);
    expect(percentDone(3999, 4000)).toBe(99);
    expect(percentDone(4000, 4000)).toBe(100);
    expect(percentDone(5000, 4000)).toBe(100);
    expect(percentDone(5, 0)).toBe(0);
  });

  it("reads rates as steps a second, a slow one as seconds a step", () => {
    expect(stepRate(1234.4)).toBe("1234 steps/s");
    expect(stepRate(12.34)).toBe("12.3 steps/s");
    expect(stepRate(2.456)).toBe("2.46 steps/s");
    expect(stepRate(0.05)).toBe("20s/step");
    expect(stepRate(1 / 150)).toBe("2m 30s/step");
    expect(stepRate(0)).toBe("stalled");
  });

  it("reads an ETA as a duration", () => {
    expect(eta(202)).toBe("ETA 3m 22s");
    expect(eta(0.3)).toBe("ETA 0s");
    expect(eta(2 * 3600 + 300)).toBe("ETA 2h 5m");
  });

  it("says everything a full report holds", () => {
    const view = progressView(progress({ total_steps: 4000, epoch: 2, epochs: 5, steps_per_second: 12.34, eta_seconds: 202, busy: "checkpointing" }));
    expect(view).toEqual({ percent: 38, steps: "1520 / 4000", epoch: "epoch 2 / 5", rate: "12.3 steps/s", eta: "ETA 3m 22s", busy: "checkpointing" });
    expect(progressLine(view)).toBe("step 1520 / 4000 · 38% · epoch 2 / 5 · 12.3 steps/s · ETA 3m 22s · checkpointing");
  });

  it("gives the step alone while the total is unknown, and no ETA", () => {
    const view = progressView(progress({ epoch: 3, steps_per_second: 4, eta_seconds: 10 }));
    expect(view.percent).toBeNull();
    expect(view.steps).toBe("step 1520");
    expect(view.eta).toBeNull();
    expect(progressLine(view)).toBe("step 1520 · epoch 3 · 4.00 steps/s");
  });

  it("has no rate before two steps are seen", () => {
    const view = progressView(progress({ step: 0, total_steps: 4000, busy: "tracing" }));
    expect(view.rate).toBeNull();
    expect(view.eta).toBeNull();
    expect(progressLine(view)).toBe("step 0 / 4000 · 0% · tracing");
  });

  it("keeps the jobs list's line narrow", () => {
    const full = progress({ total_steps: 4000, steps_per_second: 12.34, eta_seconds: 202 });
    expect(cellLine(full, progressView(full))).toBe("1520/4000 · ETA 3m 22s");
    const unknown = progress({ steps_per_second: 12.34, busy: "evaluating" });
    expect(cellLine(unknown, progressView(unknown))).toBe("step 1520 · 12.3 steps/s · evaluating");
    const early = progress({ step: 0, total_steps: 4000 });
    expect(cellLine(early, progressView(early))).toBe("0/4000");
  });
});
