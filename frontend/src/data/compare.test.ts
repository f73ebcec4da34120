import { describe, expect, it } from "vitest";
import type { JobSpec, MetricsRead } from "../api/types";
import { comparedSeries, reportingTask, specDifferences } from "./compare";

function spec(overrides: Partial<JobSpec>): JobSpec {
  return {
    name: "a",
    strategy: "parameter_server",
    entrypoint: ["python", "examples/digits.py", "--epochs", "5"],
    working_dir: ".",
    env: { DIGITS_BATCH: "64" },
    replicas: { chief: { count: 1, gpus: 0 }, worker: { count: 2, gpus: 1 }, ps: { count: 1, gpus: 0 } },
    checkpoint: { every_epochs: 1 },
    restart: { policy: "on_failure", max_restarts: 3 },
    tags: ["baseline"],
    ...overrides,
  } as JobSpec;
}

describe("spec differences", () => {
  it("lists only what differs, in the jobs' order, with a dash where unset", () => {
    const { differences, same } = specDifferences([
      spec({}),
      spec({
        name: "b",
        entrypoint: ["python", "examples/digits.py", "--epochs", "9"],
        env: { DIGITS_BATCH: "64", EXTRA: "1" },
        replicas: { chief: { count: 1, gpus: 0 }, worker: { count: 4, gpus: 1 }, ps: { count: 1, gpus: 0 } },
        tags: [],
      } as unknown as Partial<JobSpec>),
    ]);
    expect(differences).toEqual([
      { path: "entrypoint", values: ["python examples/digits.py --epochs 5", "python examples/digits.py --epochs 9"] },
      { path: "env.EXTRA", values: ["–", "1"] },
      { path: "replicas.worker.count", values: ["2", "4"] },
      { path: "tags", values: ["baseline", ""] },
    ]);
    expect(same).toBeGreaterThan(5);
  });

  it("finds nothing to show for equal specs", () => {
    expect(specDifferences([spec({}), spec({ name: "other" })]).differences).toEqual([]);
  });
});

function metrics(jobId: number, series: [string, string, number[], number[], number[]][]): MetricsRead {
  return {
    job_id: jobId,
    series: series.map(([task, name, steps, values, wall_times]) => ({ task, name, steps, values, wall_times, total_points: steps.length })),
  };
}

describe("compared series", () => {
  const first = metrics(3, [
    ["chief:0", "loss", [10, 20], [2, 1], [100, 110]],
    ["chief:0", "batch/loss", [5, 10, 15], [3, 2, 1.5], [95, 100, 105]],
    ["chief:0", "epoch", [10, 20], [1, 2], [100, 110]],
    ["chief:0", "accuracy", [10, 20], [0.5, 0.7], [100, 110]],
    ["chief:0", "lr", [10, 20], [0.01, 0.01], [100, 110]],
    ["evaluator:0", "eval/loss", [10], [2.5], [112]],
  ]);
  const second = metrics(5, [["chief:0", "loss", [10, 20, 30], [1.5, 1, 0.5], [1000, 1004, 1008]]]);

  it("takes the chief's series, one per job and metric, by step", () => {
    expect(reportingTask(first)).toBe("chief:0");
    expect(reportingTask(metrics(1, [["worker:1", "loss", [], [], []], ["worker:0", "loss", [], [], []]]))).toBe("worker:0");
    const byMetric = comparedSeries(
      [
        { id: 3, name: "a", metrics: first },
        { id: 5, name: "b", metrics: second },
      ],
      "step",
    );
    expect([...byMetric.keys()]).toEqual(["loss", "accuracy", "batch/loss", "lr"]); // no "epoch"
    const loss = byMetric.get("loss") ?? [];
    expect(loss.map((s) => s.task)).toEqual(["#3 a", "#5 b"]);
    expect(loss[1]?.steps).toEqual([10, 20, 30]);
  });

  it("aligns by the seconds since each job's first point", () => {
    const byMetric = comparedSeries(
      [
        { id: 3, name: "a", metrics: first },
        { id: 5, name: "b", metrics: second },
      ],
      "time",
    );
    const loss = byMetric.get("loss") ?? [];
    expect(loss[0]?.steps).toEqual([5, 15]); // job 3 started at wall 95 (its batch/loss)
    expect(loss[1]?.steps).toEqual([0, 4, 8]);
    expect(loss[1]?.values).toEqual([1.5, 1, 0.5]);
  });
});
