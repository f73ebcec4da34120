// The job page's controls: checkpoint now, the sidecar evaluator, suspend and resume, and
// restarting or cancelling the job or one task (those three ask first). What they may do comes from the server
// (job.actions), not from rules kept here.
import { api } from "../api/client";
import type { Task } from "../api/types";
import { confirmAction } from "../components/ConfirmDialog";
import {
  CHECKPOINT_PENDING,
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
  SUSPEND_PENDING,
  suspendDone,
} from "../data/jobActions";
import type { JobLive } from "../data/jobLive";
import type { Outcome } from "../data/outcomes";
import { useActionRunner } from "./useActionRunner";

export interface JobActions {
  outcomes: Outcome[];
  dismiss: (id: number) => void;
  busy: Set<string>;
  /** Whether the sidecar evaluator runs (so the toggle stops it). */
  evaluatorLive: boolean;
  checkpointNow: () => Promise<void>;
  toggleEvaluator: () => Promise<void>;
  /** Suspend the job, or resume it when it is suspended. */
  toggleSuspend: () => Promise<void>;
  restartJob: () => Promise<void>;
  cancelJob: () => Promise<void>;
  restartTask: (task: Task) => Promise<void>;
}

export function useJobActions(live: JobLive): JobActions {
  const { outcomes, busy, run, dismiss } = useActionRunner(() => live.refresh());
  const id = live.jobId;
  const job = live.job;
  const path = { job_id: id };

  const checkpointNow = () =>
    run("checkpoint", CHECKPOINT_PENDING, async () => {
      const answer = await api.post("/jobs/{job_id}/checkpoint", { path });
      live.checkpoints.set(answer.checkpoint.name, answer.checkpoint);
      return checkpointDone(answer);
    });

  const evaluatorLive = job?.actions.evaluator_stop ?? false;
  const toggleEvaluator = () => {
    const action = evaluatorLive ? "stop" : "start";
    return run("evaluator", evaluatorPending(action), async () => {
      const j = await api.post("/jobs/{job_id}/evaluator", { path, body: { action } });
      live.setJob(j);
      return evaluatorDone(action, j);
    });
  };

  const toggleSuspend = () =>
    job?.actions.resume
      ? run("suspend", "Resuming the job…", async () => {
          const j = await api.post("/jobs/{job_id}/resume", { path });
          live.setJob(j);
          return resumeDone(j);
        })
      : run("suspend", SUSPEND_PENDING, async () => {
          const j = await api.post("/jobs/{job_id}/suspend", { path });
          live.setJob(j);
          return suspendDone(j);
        });

  const restartJob = async () => {
    if (!(await confirmAction(restartJobConfirm(job, id)))) return;
    await run("restart", "Restarting the job…", async () => {
      const j = await api.post("/jobs/{job_id}/restart", { path });
      live.setJob(j);
      return restartJobDone(j);
    });
  };

  const cancelJob = async () => {
    if (!(await confirmAction(cancelJobConfirm(job, id)))) return;
    await run("cancel", "Cancelling the job…", async () => {
      const j = await api.post("/jobs/{job_id}/cancel", { path });
      live.setJob(j);
      return cancelJobDone(j);
    });
  };

  const restartTask = async (task: Task) => {
    if (!(await confirmAction(restartTaskConfirm(job, task)))) return;
    await run(
      `restart ${task.name}`,
      `Restarting ${task.name}…`,
      async () => {
        const j = await api.post("/jobs/{job_id}/tasks/{task}/restart", { path: { job_id: id, task: task.name } });
        live.setJob(j);
        return restartTaskDone(j, task.name);
      },
      task.name,
    );
  };

  return {
    outcomes,
    dismiss,
    busy,
    evaluatorLive,
    checkpointNow,
    toggleEvaluator,
    toggleSuspend,
    restartJob,
    cancelJob,
    restartTask,
  };
}
