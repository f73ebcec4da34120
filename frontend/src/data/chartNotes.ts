// What an empty epoch chart says: waiting for an epoch to end only while that may still happen.
// A job whose script reports only its loss (or only batch or custom metrics) would otherwise
// show "Waiting for the first epoch to end…" forever.

const NOT_EPOCH_METRICS = new Set(["epoch", "lr", "examples_per_sec", "steps_per_sec"]);
export const WAITING = "Waiting for the first epoch to end…";

/** The note for the empty "loss" or "metrics" chart, given every series name the job has. */
export function epochChartNote(chart: "loss" | "metrics", names: Iterable<string>, finished: boolean): string {
  const all = [...new Set(names)].sort();
  const epochEnded = all.some((n) => n === "epoch" || n === "loss" || n === "val_loss");
  const epochLevel = all.filter((n) => !n.includes("/") && !NOT_EPOCH_METRICS.has(n));
  const batch = all.filter((n) => n.startsWith("batch/"));
  if (chart === "loss") {
    if (epochEnded) return `This job reports no loss at its epochs' ends (only: ${epochLevel.join(", ") || "epoch"}).`;
    if (finished) return batch.length ? `This job reported no epoch metrics (only batch metrics: ${batch.join(", ")}).` : "This job reported no epoch metrics.";
    return WAITING;
  }
  if (epochEnded) return `This job reports no epoch metrics besides its loss (only: ${epochLevel.join(", ") || "loss"}).`;
  if (finished) return batch.length ? `This job reported no epoch metrics (only batch metrics: ${batch.join(", ")}).` : "This job reported no epoch metrics.";
  return WAITING;
}
