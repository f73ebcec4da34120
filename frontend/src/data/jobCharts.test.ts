import { describe, expect, it } from "vitest";
import { chooseCharts, emptyNote, seriesLabel, sortSeries, type ChartChoice } from "./jobCharts";
import { Series } from "./series";

function series(task: string, name: string, ...values: number[]): Series {
  const s = new Series(task, name);
  values.forEach((v, i) => s.add(i + 1, v, 1_000 + i, 0));
  return s;
}

const drawn = (choices: ChartChoice[]) => Object.fromEntries(choices.map(({ spec, list }) => [spec.id, list.map((s) => `${s.task}:${s.name}`)]));

describe("the job page's chart catalogue", () => {
  it("always shows the fixed charts, and the queue and other-metrics charts only with series", () => {
    expect(chooseCharts([]).map((c) => c.spec.id)).toEqual(["loss", "metrics", "batch", "throughput", "closures", "eval"]);
  });

  it("puts each metric on its chart, hides the bookkeeping ones and collects the rest", () => {
    const all = sortSeries([
      series("chief:0", "val_loss"),
      series("chief:0", "loss"),
      series("chief:0", "accuracy"),
      series("chief:0", "epoch"),
      series("chief:0", "lr"),
      series("chief:0", "batch/loss"),
      series("chief:0", "steps_per_sec"),
      series("chief:0", "worker:1/closures_done"),
      series("chief:0", "worker:1/other"),
      series("evaluator:0", "eval/loss"),
      series("chief:0", "coordinator/inflight"),
      series("chief:0", "coordinator/other"),
      series("chief:0", "custom/thing"),
    ]);
    expect(drawn(chooseCharts(all))).toEqual({
      loss: ["chief:0:loss", "chief:0:val_loss"],
      metrics: ["chief:0:accuracy"],
      batch: ["chief:0:batch/loss"],
      throughput: ["chief:0:steps_per_sec"],
      closures: ["chief:0:worker:1/closures_done"],
      eval: ["evaluator:0:eval/loss"],
      coordinator: ["chief:0:coordinator/inflight"],
      other: ["chief:0:custom/thing"],
    });
  });

  it("sorts series by name, then task", () => {
    const sorted = sortSeries([series("worker:1", "loss"), series("chief:0", "loss"), series("chief:0", "accuracy")]);
    expect(sorted.map((s) => `${s.name} ${s.task}`)).toEqual(["accuracy chief:0", "loss chief:0", "loss worker:1"]);
  });

  it("names the task in a label only when several tasks share a chart", () => {
    const [one] = chooseCharts([series("chief:0", "loss")]);
    expect(one && seriesLabel(one)(one.list[0] as Series)).toBe("loss");
    const [two] = chooseCharts(sortSeries([series("chief:0", "loss"), series("worker:0", "loss")]));
    expect(two?.list.map(seriesLabel(two))).toEqual(["loss · chief:0", "loss · worker:0"]);
    const closures = chooseCharts([series("chief:0", "worker:3/closures_done")]).find((c) => c.spec.id === "closures");
    expect(closures?.list.map(seriesLabel(closures))).toEqual(["worker:3"]);
  });

  it("says what an empty chart waits for", () => {
    const [loss, , batch] = chooseCharts([]).map((c) => c.spec);
    if (!loss || !batch) throw new Error("the catalogue lost its first charts");
    expect(emptyNote(batch, [], false, false)).toBe("Loading metrics…");
    expect(emptyNote(batch, [], true, false)).toBe("No batch metrics yet.");
    expect(emptyNote(loss, [], true, false)).toBe("Waiting for the first epoch to end…");
    expect(emptyNote(loss, ["batch/loss"], true, true)).toBe("This job reported no epoch metrics (only batch metrics: batch/loss).");
  });
});
