// What one row of the jobs list says about a job: its strategy, its replicas and its restarts.
import type { Job } from "../api/types";

const STRATEGY_LABEL: Record<string, string> = {
  parameter_server: "parameter server",
  multi_worker_mirrored: "multi-worker",
  mirrored: "mirrored",
};
const ROLE_LABEL: Record<string, string> = { evaluator: "eval" };

export const strategyLabel = (strategy: string): string => STRATEGY_LABEL[strategy] ?? strategy;
export const roleLabel = (role: string): string => ROLE_LABEL[role] ?? role;

/** [role, count] for each role the job has, chief first. */
export function replicaSummary(job: Pick<Job, "tasks">): [string, number][] {
  const counts = new Map<string, number>();
  for (const task of job.tasks) counts.set(task.role, (counts.get(task.role) ?? 0) + 1);
  return ["chief", "worker", "ps", "evaluator"].filter((r) => counts.has(r)).map((r) => [r, counts.get(r) ?? 0]);
}

/** Tasks restarted alone (a parameter-server worker) beyond the job's own restarts. */
export function tasksRestartedAlone(job: Pick<Job, "tasks" | "restart_count">): number {
  return job.tasks.reduce((n, t) => n + Math.max(0, t.attempt - job.restart_count), 0);
}
