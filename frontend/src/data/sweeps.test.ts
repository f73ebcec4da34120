import { describe, expect, it } from "vitest";
import {
  bestTrial,
  compareHash,
  curveColumns,
  lastPoint,
  objectiveColumns,
  paramColumns,
  parameterNames,
  paramsLine,
  paramText,
  progressText,
  reachedValue,
  refreshMs,
  selectedJobIds,
  sortTrials,
  stopConfirm,
  sweepFinished,
  sweepProgress,
  toggled,
  type Sweep,
  type Trial,
} from "./sweeps";

function trial(number: number, overrides: Partial<Trial> = {}): Trial {
  return {
    number,
    job_id: 100 + number,
    job_status: "succeeded",
    params: { lr: 0.01, units: 32 },
    status: "succeeded",
    value: 0.5,
    curve: [
      [1, 1.0],
      [2, 0.5],
    ],
    reason: null,
    created_at: "2025-01-01T00:00:00Z",
    finished_at: "2025-01-01T00:01:00Z",
    ...overrides,
  };
}

const spec = {
  name: "s",
  job: {},
  parameters: {
    lr: { type: "float", low: 1e-4, high: 0.3, log: true },
    units: { type: "int", low: 8, high: 128, log: false, step: 1 },
    act: { type: "categorical", choices: ["relu", "tanh"] },
  },
  objective: { metric: "val_loss", direction: "minimize" },
  budget: { trials: 4, parallel: 2 },
  sampler: { type: "tpe", seed: 1 },
  early_stopping: { type: "asha", resource: "epochs", min_resource: 1, reduction_factor: 2, startup_trials: 3 },
} as unknown as Sweep["spec"];

const counts = { running: 1, succeeded: 2, pruned: 1, failed: 0, stopped: 0 };

describe("progress", () => {
  it("counts ended trials of the budget and those running", () => {
    expect(sweepProgress({ counts, budget: 6 })).toEqual({ ended: 3, running: 1, budget: 6 });
    expect(progressText({ counts, budget: 6 })).toBe("3 / 6 · 1 running");
    expect(progressText({ counts: { ...counts, running: 0 }, budget: 3 })).toBe("3 / 3");
  });
  it("knows which states are unfinished and polls faster while one is", () => {
    expect(sweepFinished("running")).toBe(false);
    expect(sweepFinished("stopping")).toBe(false);
    expect(sweepFinished("stopped")).toBe(true);
    expect(refreshMs(["succeeded", "stopping"])).toBe(2_000);
    expect(refreshMs(["succeeded", "failed"])).toBe(30_000);
    expect(refreshMs([])).toBe(30_000);
  });
});

describe("trials", () => {
  it("sorts by number and finds the best succeeded one, the earliest of equals", () => {
    const trials = [
      trial(3, { value: 0.2 }),
      trial(0, { value: 0.4 }),
      trial(1, { status: "pruned", value: null, curve: [[1, 0.1]] }),
      trial(2, { value: 0.2 }),
    ];
    expect(sortTrials(trials).map((t) => t.number)).toEqual([0, 1, 2, 3]);
    expect(bestTrial(trials, "minimize")?.number).toBe(2);
    expect(bestTrial(trials, "maximize")?.number).toBe(0);
    expect(bestTrial([trial(0, { status: "failed", value: null })], "minimize")).toBeNull();
  });
  it("reads the value a trial reached: the final one, else its last intermediate one", () => {
    expect(reachedValue(trial(0, { value: 0.3 }))).toBe(0.3);
    expect(reachedValue(trial(0, { value: null, status: "pruned" }))).toBe(0.5);
    expect(reachedValue(trial(0, { value: null, curve: [] }))).toBeNull();
  });
  it("names the parameters in the spec's order, then any other", () => {
    expect(parameterNames(spec, [trial(0, { params: { extra: 1, lr: 0.1 } })])).toEqual(["lr", "units", "act", "extra"]);
  });
  it("writes parameters short", () => {
    expect(paramText(0.000123456)).toBe("1.235e-4");
    expect(paramText(0.0123456)).toBe("0.01235");
    expect(paramText(64)).toBe("64");
    expect(paramText("relu")).toBe("relu");
    expect(paramText(true)).toBe("true");
    expect(paramText(undefined)).toBe("–");
    expect(paramsLine({ lr: 0.01, units: 8 })).toBe("lr=0.01, units=8");
  });
});

describe("charts", () => {
  it("draws the objective by trial: a series per kind of end, and the best so far", () => {
    const trials = [
      trial(0, { value: 0.5 }),
      trial(1, { status: "pruned", value: null, curve: [[1, 2.3]] }),
      trial(2, { value: 0.3 }),
      trial(3, { status: "running", value: null, curve: [] }),
      trial(4, { status: "stopped", value: null, curve: [[1, 1.5]] }),
    ];
    const { x, series } = objectiveColumns(trials, "minimize");
    expect(x).toEqual([0, 1, 2, 3, 4]);
    expect(series.map((s) => s.label)).toEqual(["succeeded", "pruned", "failed", "best so far"]);
    expect(series[0]!.values).toEqual([0.5, null, 0.3, null, null]);
    expect(series[1]!.values).toEqual([null, 2.3, null, null, null]);
    expect(series[2]!.values).toEqual([null, null, null, null, 1.5]);
    expect(series[3]!.values).toEqual([0.5, 0.5, 0.3, 0.3, 0.3]);
  });
  it("puts a parameter on x, sorted, log for a log parameter, categories by index", () => {
    const trials = [
      trial(0, { params: { lr: 0.1, units: 64, act: "tanh" }, value: 0.9 }),
      trial(1, { params: { lr: 0.001, units: 8, act: "relu" }, status: "pruned", value: null, curve: [[1, 2]] }),
      trial(2, { params: { lr: 0.01, units: 32, act: "tanh" }, value: 0.4 }),
      trial(3, { params: { lr: 0.02, units: 16, act: "relu" }, status: "running", value: null, curve: [] }),
    ];
    const lr = paramColumns(trials, "lr", spec.parameters.lr);
    expect(lr.log).toBe(true);
    expect(lr.labels).toBeNull();
    expect(lr.x).toEqual([0.001, 0.01, 0.1]); // the running trial reached no value yet
    expect(lr.series.map((s) => [s.label, s.values])).toEqual([
      ["succeeded", [null, 0.4, 0.9]],
      ["pruned", [2, null, null]],
    ]);
    const units = paramColumns(trials, "units", spec.parameters.units);
    expect(units.log).toBe(false);
    expect(units.x).toEqual([8, 32, 64]);
    const act = paramColumns(trials, "act", spec.parameters.act);
    expect(act.labels).toEqual(["relu", "tanh"]);
    expect(act.x).toEqual([0, 1, 1]);
    expect(act.series[0]!.values).toEqual([null, 0.9, 0.4]); // equal x: in trial order
  });
  it("overlays the learning curves on every resource any trial reached", () => {
    const trials = [
      trial(1, { status: "pruned", value: null, curve: [[1, 2.0]] }),
      trial(0, {
        curve: [
          [1, 1.0],
          [2, 0.7],
          [4, 0.5],
        ],
      }),
      trial(2, { status: "running", value: null, curve: [] }),
    ];
    const curves = curveColumns(trials);
    expect(curves.x).toEqual([1, 2, 4]);
    expect(curves.trials.map((t) => t.number)).toEqual([0, 1]);
    expect(curves.series.map((s) => s.label)).toEqual(["trial 0", "trial 1"]);
    expect(curves.series[0]!.values).toEqual([1.0, 0.7, 0.5]);
    expect(curves.series[1]!.values).toEqual([2.0, null, null]);
    expect(lastPoint(curves.series[1]!.values)).toBe(0);
    expect(lastPoint([null, null])).toBe(-1);
  });
});

describe("selection", () => {
  const trials = [trial(2), trial(0), trial(1)];
  it("toggles a trial in and out, in order", () => {
    expect(toggled([2], 0)).toEqual([0, 2]);
    expect(toggled([0, 2], 2)).toEqual([0]);
  });
  it("opens the compare page with the selected trials' jobs, from two on", () => {
    expect(selectedJobIds(trials, [2, 0])).toEqual([100, 102]);
    expect(compareHash(trials, [2, 0])).toBe("#/compare?jobs=100,102");
    expect(compareHash(trials, [1])).toBeNull();
    expect(compareHash(trials, [7, 8])).toBeNull();
  });
  it("asks before stopping, saying what happens to the running trials", () => {
    expect(stopConfirm({ id: 3, name: "digits", counts }).body).toContain("its 1 running trial is cancelled");
    expect(stopConfirm({ id: 3, name: "digits", counts: { ...counts, running: 0 } }).body).not.toContain("cancelled");
  });
});
