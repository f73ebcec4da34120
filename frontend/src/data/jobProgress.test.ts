import { describe, expect, it } from "vitest";
import { progressSummary } from "./jobProgress";
import { Series } from "./series";

function series(name: string, points: [number, number][], task = "chief:0"): Series {
  const s = new Series(task, name);
  for (const [step, value] of points) s.add(step, value, step, 0);
  return s;
}

describe("the job's progress line", () => {
  it("is empty before any point", () => {
    expect(progressSummary([])).toBe("");
    expect(progressSummary([series("loss", [])])).toBe("");
  });

  it("gives the epoch, the furthest step, the loss and the rate", () => {
    const all = [
      series("epoch", [[80, 4]]),
      series("loss", [[40, 0.5], [80, 0.3125]]),
      series("batch/loss", [[95, 0.2]], "worker:0"),
      series("eval/loss", [[500, 0.1]], "evaluator:0"),
      series("steps_per_sec", [[80, 12]]),
    ];
    expect(progressSummary(all)).toBe("epoch 4 · step 95 · loss 0.3125 · 12 steps/s");
  });

  it("gives the loss alone when the runtime's report says the rest", () => {
    const all = [series("epoch", [[80, 4]]), series("loss", [[80, 0.3125]]), series("steps_per_sec", [[80, 12]])];
    expect(progressSummary(all, { steps: false })).toBe("loss 0.3125");
  });

  it("falls back to the batch loss before an epoch ended", () => {
    expect(progressSummary([series("batch/loss", [[7, 1.5]])])).toBe("step 7 · loss 1.5");
  });
});
