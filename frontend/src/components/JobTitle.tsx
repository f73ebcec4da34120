// The job page's title block: name, status, what the job is and how far it got, and its reason.
import { isFinished, type Job } from "../api/types";
import { clientLine } from "../data/jobClient";
import { ago, duration } from "../ui/format";
import { href } from "../ui/router";
import { StatusBadge } from "./common";

export function JobTitle({ job, progress, now }: { job: Job; progress: string; now: number }) {
  const finished = isFinished(job.status);
  return (
    <div class="job-title">
      <div class="line">
        <a href={href.jobs()} class="muted">
          Jobs
        </a>
        <span class="faint">/</span>
        <h1 data-testid="job-name">{job.name}</h1>
        <span class="faint num">#{job.id}</span>
        <StatusBadge status={job.status} testid="job-status" />
      </div>
      <div class="meta">
        <span>{job.strategy}</span>
        <span>
          {job.tasks.length} tasks
        </span>
        <span data-testid="job-restarts" title="Restarts of every kind: after failures, by request, after a Slurm requeue">
          restarts {job.restart_count}
        </span>
        <span data-testid="job-failures" title="Restarts after failures: only these count against the restart policy's max_restarts and its backoff">
          failures {job.failure_count} of {job.spec.restart.max_restarts}
        </span>
        {job.spec.slurm ? (
          <span data-testid="job-slurm" title="The Slurm job it runs as">
            Slurm job {job.slurm_job_id ?? "not submitted yet"}
          </span>
        ) : null}
        {job.spec.coordinator === "client" ? (
          <span data-testid="job-client" title="Its coordinator is a client: a notebook or script that attached with runtime.connect">
            {clientLine(job, now)}
          </span>
        ) : null}
        {job.spec.environment?.image ? (
          <span data-testid="job-image" title="Each task runs in a container of this image">
            image {job.spec.environment.image}
          </span>
        ) : null}
        <span data-testid="job-project" title="The project it belongs to">
          project {job.spec.project ?? `#${job.project_id}`}
        </span>
        <span title={job.created_at} data-testid="job-submitted">
          submitted {ago(job.created_at, now)}
          {job.submitted_by ? ` by ${job.submitted_by}` : ""}
        </span>
        {job.started_at ? (
          <span>
            {finished && job.finished_at ? "ran" : "running for"}{" "}
            {duration(((finished && job.finished_at ? Date.parse(job.finished_at) : now) - Date.parse(job.started_at)) / 1000)}
          </span>
        ) : null}
        {progress ? <span data-testid="job-progress">{progress}</span> : null}
      </div>
      {job.reason ? (
        <div class={`reason${job.status === "failed" ? " bad" : ""}`} data-testid="job-reason">
          {job.reason}
        </div>
      ) : null}
    </div>
  );
}
