import { describe, expect, it } from "vitest";
import type { TaskStats, UsageFrame } from "../api/types";
import { taskFigures, taskUsageText } from "./usage";

const stats: TaskStats = { attempt: 1, cpu_percent: 49.6, cpu_seconds: 12, rss_bytes: 300 * 1024 * 1024, sampled_at: "2026-11-24T01:00:00Z" };

function frame(attempt: number, values: UsageFrame["values"]): UsageFrame {
  return { type: "usage", task: "worker:0", attempt, host: "h", wall_time: 1, values, cursor: "c" };
}

describe("task usage", () => {
  it("reads the REST stats", () => {
    expect(taskUsageText(taskFigures(stats))).toBe("CPU 50% · 300 MiB");
  });

  it("prefers a live frame of the same or a later attempt", () => {
    const live = frame(1, { "task/cpu_percent": 210, "task/rss_bytes": 2 * 1024 ** 3 });
    expect(taskUsageText(taskFigures(stats, live))).toBe("CPU 210% · 2.0 GiB");
    expect(taskUsageText(taskFigures(stats, frame(0, { "task/cpu_percent": 1 })))).toBe("CPU 50% · 300 MiB");
  });

  it("shows nothing without figures, and a dash for a missing one", () => {
    expect(taskUsageText(taskFigures(null))).toBeNull();
    expect(taskUsageText(taskFigures({ ...stats, cpu_percent: null, rss_bytes: null }))).toBeNull();
    expect(taskUsageText(taskFigures({ ...stats, cpu_percent: null }))).toBe("CPU – · 300 MiB");
  });
});
