import { describe, expect, it } from "vitest";
import type { CheckpointNow, Job, Task } from "../api/types";
import {
  cancelJobConfirm,
  cancelJobDone,
  checkpointDone,
  evaluatorDone,
  evaluatorPending,
  restartJobConfirm,
  restartJobDone,
  restartTaskConfirm,
  restartTaskDone,
  resumeDone,
  suspendDone,
} from "./jobActions";

const task = (fields: Partial<Task>) => ({ name: "worker:1", role: "worker", host: "gpu-a", port: 2222, status: "running", attempt: 2, ...fields }) as Task;
const job = (fields: Partial<Job>) => ({ name: "digits", strategy: "parameter_server", status: "running", reason: null, tasks: [], ...fields }) as unknown as Job;

describe("what the job page's actions ask first", () => {
  it("names the job, or its id before it loaded, and asks as a danger", () => {
    expect(restartJobConfirm(job({}), 7)).toEqual({
      title: "Restart job digits?",
      body: "Every task stops and the job is placed again; training resumes from its last backup.",
      confirmLabel: "Restart job",
      danger: true,
    });
    expect(cancelJobConfirm(null, 7)).toEqual({
      title: "Cancel job 7?",
      body: "Its tasks are stopped. A cancelled job cannot be resumed.",
      confirmLabel: "Cancel job",
      danger: true,
    });
  });

  it("says a parameter-server worker restarts alone, and any other task with its role's", () => {
    const alone = restartTaskConfirm(job({}), task({}));
    expect(alone.title).toBe("Restart worker:1?");
    expect(alone.confirmLabel).toBe("Restart worker:1");
    expect(alone.body).toBe("worker:1 restarts alone on gpu-a:2222; the coordinator carries on without it meanwhile.");
    expect(restartTaskConfirm(job({}), task({ host: null, port: null })).body).toBe(
      "worker:1 restarts alone on its host:?; the coordinator carries on without it meanwhile.",
    );
    const inPlace = "worker:1 restarts in place, with the tasks its role restarts along with it.";
    expect(restartTaskConfirm(job({ strategy: "multi_worker_mirrored" }), task({})).body).toBe(inPlace);
    expect(restartTaskConfirm(job({}), task({ name: "chief:0", role: "chief" })).body).toBe(
      "chief:0 restarts in place, with the tasks its role restarts along with it.",
    );
  });
});

describe("what the job page's actions report", () => {
  it("describes the checkpoint written", () => {
    const answer = { task: "chief:0", seconds: 1.234, checkpoint: { name: "ckpt-3", step: 300, epoch: 2, size_bytes: 2048 } } as CheckpointNow;
    expect(checkpointDone(answer)).toBe("Checkpoint ckpt-3 written by chief:0 at step 300 (epoch 2), 2.0 KiB, in 1.23 s.");
    const noEpoch = { ...answer, checkpoint: { ...answer.checkpoint, step: null, epoch: null } } as CheckpointNow;
    expect(checkpointDone(noEpoch)).toBe("Checkpoint ckpt-3 written by chief:0 at step ?, 2.0 KiB, in 1.23 s.");
  });

  it("describes the evaluator, the job and the task after their requests", () => {
    expect(evaluatorPending("start")).toBe("Starting the sidecar evaluator…");
    expect(evaluatorPending("stop")).toBe("Stopping the sidecar evaluator…");
    const withEvaluator = job({ tasks: [task({ name: "evaluator:0", role: "evaluator", status: "scheduled", host: "cpu-b" })] });
    expect(evaluatorDone("start", withEvaluator)).toBe("Sidecar evaluator scheduled on cpu-b; it evaluates each new checkpoint.");
    expect(evaluatorDone("start", job({}))).toBe("Sidecar evaluator requested; it evaluates each new checkpoint.");
    expect(evaluatorDone("stop", job({}))).toBe("Sidecar evaluator stopped.");
    expect(restartJobDone(job({ status: "restarting", reason: "restart requested" }))).toBe(
      "Job restart requested: restarting (restart requested).",
    );
    expect(restartJobDone(job({ status: "pending" }))).toBe("Job restart requested: pending.");
    expect(cancelJobDone(job({ status: "cancelled" }))).toBe("Job cancelled.");
    expect(restartTaskDone(job({ tasks: [task({ status: "scheduled", attempt: 3 })] }), "worker:1")).toBe(
      "worker:1 restart requested (attempt 3, scheduled).",
    );
    expect(restartTaskDone(job({}), "worker:1")).toBe("worker:1 restart requested (attempt ?, ?).");
  });

  it("says where a suspended job resumes from, and that a resumed one waits for room", () => {
    const reason = "suspended by request; resumes from checkpoint ckpt-4 at step 96 (0 steps lost)";
    expect(suspendDone(job({ status: "suspended", reason }))).toBe(`Job suspended: ${reason}.`);
    expect(resumeDone(job({ status: "pending" }))).toBe(
      "Job resumed: pending; it continues from where it was suspended once placed.",
    );
  });
});
