// One row of the jobs list: a click opens the job, the box picks it to compare, a tag searches;
// a running job shows how far it is.
import type { Job } from "../api/types";
import { replicaSummary, roleLabel, strategyLabel, tasksRestartedAlone } from "../data/jobRow";
import { ago } from "../ui/format";
import { href, navigate } from "../ui/router";
import { StatusBadge } from "./common";
import { ProgressCell } from "./RunProgress";

export function JobRow({
  job,
  now,
  picked,
  onPick,
  onTag,
}: {
  job: Job;
  now: number;
  picked: boolean;
  onPick: () => void;
  onTag: (tag: string) => void;
}) {
  const taskRestarts = tasksRestartedAlone(job);
  return (
    <tr data-testid="job-row" data-job-id={job.id} data-status={job.status} onClick={() => navigate(href.job(job.id))} style={{ cursor: "pointer" }}>
      <td class="pick" onClick={(e) => e.stopPropagation()}>
        <input type="checkbox" checked={picked} onChange={onPick} aria-label={`Compare job ${job.id}`} data-testid="job-pick" />
      </td>
      <td class="num muted">#{job.id}</td>
      <td>
        <a href={href.job(job.id)} onClick={(e) => e.stopPropagation()}>
          <b>{job.name}</b>
        </a>
        {job.spec.tags?.length ? (
          <span class="job-tags">
            {job.spec.tags.map((tag) => (
              <button
                type="button"
                class="tag"
                key={tag}
                title={`Only jobs tagged ${tag}`}
                onClick={(e) => {
                  e.stopPropagation();
                  onTag(tag);
                }}
                data-testid="job-tag"
              >
                {tag}
              </button>
            ))}
          </span>
        ) : null}
        {job.spec.description ? (
          <div class="muted" style={{ fontSize: "12px", maxWidth: "340px", overflow: "hidden", textOverflow: "ellipsis", whiteSpace: "nowrap" }} title={job.spec.description}>
            {job.spec.description}
          </div>
        ) : null}
        {job.reason ? (
          <div class="muted" style={{ fontSize: "12px", maxWidth: "340px", overflow: "hidden", textOverflow: "ellipsis", whiteSpace: "nowrap" }} title={job.reason}>
            {job.reason}
          </div>
        ) : null}
      </td>
      <td class="nowrap" data-testid="job-project" title={job.submitted_by ? `submitted by ${job.submitted_by}` : undefined}>
        {job.spec.project ?? `#${job.project_id}`}
        {job.submitted_by ? <div class="faint" style={{ fontSize: "12px" }}>{job.submitted_by}</div> : null}
      </td>
      <td>
        <StatusBadge status={job.status} />
      </td>
      <td>
        <ProgressCell progress={job.progress} />
      </td>
      <td class="muted nowrap" title={job.strategy}>
        {strategyLabel(job.strategy)}
      </td>
      <td>
        <span class="replicas">
          {replicaSummary(job).map(([role, n]) => (
            <span class="tag" key={role} title={`${n} ${role}`}>
              {n} {roleLabel(role)}
            </span>
          ))}
        </span>
      </td>
      <td class="num nowrap" data-testid="job-restarts" title={`job restarts: ${job.restart_count} (${job.failure_count} after failures); tasks restarted alone: ${taskRestarts}`}>
        {job.restart_count}
        {taskRestarts > 0 ? <span class="faint"> +{taskRestarts} task</span> : null}
      </td>
      <td class="num nowrap muted" title={job.created_at}>
        {ago(job.created_at, now)}
      </td>
    </tr>
  );
}
