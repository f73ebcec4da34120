import { describe, expect, it } from "vitest";
import { epochChartNote, WAITING } from "./chartNotes";

describe("empty epoch chart notes", () => {
  it("waits while no epoch has ended and the job runs", () => {
    expect(epochChartNote("metrics", [], false)).toBe(WAITING);
    expect(epochChartNote("loss", ["batch/loss", "steps_per_sec"], false)).toBe(WAITING);
  });

  it("says what the job reports once an epoch has ended", () => {
    const names = ["loss", "epoch", "lr", "batch/loss", "steps_per_sec"];
    expect(epochChartNote("metrics", names, false)).toBe("This job reports no epoch metrics besides its loss (only: loss).");
    expect(epochChartNote("metrics", [...names, "val_loss"], true)).toBe(
      "This job reports no epoch metrics besides its loss (only: loss, val_loss).",
    );
    expect(epochChartNote("loss", ["epoch", "mae"], false)).toBe("This job reports no loss at its epochs' ends (only: mae).");
  });

  it("says a finished job streamed only batch metrics, or none", () => {
    expect(epochChartNote("metrics", ["batch/loss", "batch/accuracy"], true)).toBe(
      "This job reported no epoch metrics (only batch metrics: batch/accuracy, batch/loss).",
    );
    expect(epochChartNote("loss", [], true)).toBe("This job reported no epoch metrics.");
  });
});
