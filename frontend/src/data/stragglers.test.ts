import { describe, expect, it } from "vitest";
import type { StreamEvent, Task } from "../api/types";
import { slowWorkers } from "./stragglers";

const task = (name: string, attempt = 0, status = "running") => ({ name, attempt, status }) as Task;
let id = 0;
const health = (taskName: string, data: Record<string, unknown>, message = "") =>
  ({ id: ++id, kind: "health", task: taskName, message, data }) as unknown as StreamEvent;
const slow = (attempt: number) =>
  health(
    "worker:1",
    { finding: "straggler", attempt, rates: { "worker:0": 6.3, "worker:1": 2.1 }, cpu_percent: { "worker:0": 97, "worker:1": 30.6 } },
    "worker:1 is slow: 2.1 closures/s vs median 4.2 over 30s",
  );

describe("slow workers, from the job's health events", () => {
  it("flags a worker found slow on its current attempt, with the evidence", () => {
    const flagged = slowWorkers([slow(0)], [task("worker:0"), task("worker:1")]);
    expect([...flagged.keys()]).toEqual(["worker:1"]);
    expect(flagged.get("worker:1")).toBe(
      "worker:1 is slow: 2.1 closures/s vs median 4.2 over 30s\nclosures/s: worker:0 6.3, worker:1 2.1\nCPU: worker:0 97%, worker:1 31%",
    );
  });

  it("forgets it once cleared, moved (a new attempt) or stopped", () => {
    expect(slowWorkers([slow(0), health("worker:1", { finding: "straggler_cleared" })], [task("worker:1")]).size).toBe(0);
    expect(slowWorkers([slow(0)], [task("worker:1", 1)]).size).toBe(0);
    expect(slowWorkers([slow(0)], [task("worker:1", 0, "stopped")]).size).toBe(0);
    expect(slowWorkers([health("worker:1", { finding: "hung" })], [task("worker:1")]).size).toBe(0);
  });
});
