// The job page's actions in words: what each asks before it runs, says while it runs and reports
// once the server answered.
import type { CheckpointNow, Job, Task } from "../api/types";
import type { ConfirmRequest } from "../components/ConfirmDialog";
import { bytes } from "../ui/format";

export type JobRef = Pick<Job, "name" | "strategy"> | null;

export function restartJobConfirm(job: JobRef, id: number): ConfirmRequest {
  return {
    title: `Restart job ${job?.name ?? id}?`,
    body: "Every task stops and the job is placed again; training resumes from its last backup.",
    confirmLabel: "Restart job",
    danger: true,
  };
}

export function cancelJobConfirm(job: JobRef, id: number): ConfirmRequest {
  return {
    title: `Cancel job ${job?.name ?? id}?`,
    body: "Its tasks are stopped. A cancelled job cannot be resumed.",
    confirmLabel: "Cancel job",
    danger: true,
  };
}

/** A parameter-server worker restarts alone; any other task takes the tasks its role restarts along. */
export function restartTaskConfirm(job: JobRef, task: Pick<Task, "name" | "role" | "host" | "port">): ConfirmRequest {
  return {
    title: `Restart ${task.name}?`,
    body:
      job?.strategy === "parameter_server" && task.role === "worker"
        ? `${task.name} restarts alone on ${task.host ?? "its host"}:${task.port ?? "?"}; the coordinator carries on without it meanwhile.`
        : `${task.name} restarts in place, with the tasks its role restarts along with it.`,
    confirmLabel: `Restart ${task.name}`,
    danger: true,
  };
}

export const CHECKPOINT_PENDING = "Checkpoint requested: waiting for the chief to write it…";

export function checkpointDone(answer: Pick<CheckpointNow, "checkpoint" | "task" | "seconds">): string {
  const c = answer.checkpoint;
  return `Checkpoint ${c.name} written by ${answer.task} at step ${c.step ?? "?"}${c.epoch !== null ? ` (epoch ${c.epoch})` : ""}, ${bytes(c.size_bytes)}, in ${answer.seconds.toFixed(2)} s.`;
}

export type EvaluatorAction = "start" | "stop";

export function evaluatorPending(action: EvaluatorAction): string {
  return action === "start" ? "Starting the sidecar evaluator…" : "Stopping the sidecar evaluator…";
}

export function evaluatorDone(action: EvaluatorAction, job: Pick<Job, "tasks">): string {
  const t = job.tasks.find((x) => x.role === "evaluator");
  return action === "start"
    ? `Sidecar evaluator ${t?.status ?? "requested"}${t?.host ? ` on ${t.host}` : ""}; it evaluates each new checkpoint.`
    : "Sidecar evaluator stopped.";
}

export function restartJobDone(job: Pick<Job, "status" | "reason">): string {
  return `Job restart requested: ${job.status}${job.reason ? ` (${job.reason})` : ""}.`;
}

export function cancelJobDone(job: Pick<Job, "status">): string {
  return `Job ${job.status}.`;
}

export function restartTaskDone(job: Pick<Job, "tasks">, name: string): string {
  const t = job.tasks.find((x) => x.name === name);
  return `${name} restart requested (attempt ${t?.attempt ?? "?"}, ${t?.status ?? "?"}).`;
}

export const SUSPEND_PENDING = "Suspending: waiting for the checkpoint it resumes from…";

export function suspendDone(job: Pick<Job, "status" | "reason">): string {
  return `Job ${job.status}${job.reason ? `: ${job.reason}` : ""}.`;
}

export function resumeDone(job: Pick<Job, "status">): string {
  return `Job resumed: ${job.status}; it continues from where it was suspended once placed.`;
}
