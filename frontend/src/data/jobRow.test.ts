import { describe, expect, it } from "vitest";
import type { Job, Task } from "../api/types";
import { replicaSummary, roleLabel, strategyLabel, tasksRestartedAlone } from "./jobRow";

const task = (role: string, attempt = 0) => ({ name: `${role}:0`, role, attempt }) as unknown as Task;
const job = (id: number, tasks: Task[], restart_count = 0) => ({ id, status: "running", reason: null, tasks, restart_count }) as unknown as Job;

describe("a row of the jobs list", () => {
  it("counts replicas by role, chief first", () => {
    const tasks = [task("worker"), task("ps"), task("evaluator"), task("worker"), task("chief")];
    expect(replicaSummary(job(1, tasks))).toEqual([
      ["chief", 1],
      ["worker", 2],
      ["ps", 1],
      ["evaluator", 1],
    ]);
    expect(replicaSummary(job(1, []))).toEqual([]);
  });

  it("counts the restarts of tasks restarted alone beyond the job's own", () => {
    expect(tasksRestartedAlone(job(1, [task("chief", 1), task("worker", 3), task("worker", 1)], 1))).toBe(2);
    expect(tasksRestartedAlone(job(1, [task("chief", 0)], 2))).toBe(0);
  });

  it("shortens strategies and roles it knows", () => {
    expect(strategyLabel("parameter_server")).toBe("parameter server");
    expect(strategyLabel("something_new")).toBe("something_new");
    expect(roleLabel("evaluator")).toBe("eval");
    expect(roleLabel("worker")).toBe("worker");
  });
});
