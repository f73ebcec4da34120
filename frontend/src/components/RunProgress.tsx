// A running job's progress (JobRead.progress): a cell of the jobs list and a strip of the job
// page. Nothing is drawn before the first report or once the job has ended (it is null then).
import type { JobProgress } from "../api/types";
import { cellLine, progressLine, progressView, type ProgressView } from "../data/runProgress";

function Bar({ view }: { view: ProgressView }) {
  if (view.percent === null) return null;
  return (
    <div class="bar" role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={view.percent} aria-label="Steps done">
      <i style={{ width: `${view.percent}%` }} />
    </div>
  );
}

function data(progress: JobProgress, view: ProgressView) {
  return {
    "data-step": progress.step,
    "data-total-steps": progress.total_steps ?? "",
    "data-percent": view.percent ?? "",
    "data-busy": view.busy ?? "",
  };
}

/** The jobs list's cell: a small bar with the percent, then steps and ETA; the step alone
 * while the total is unknown. */
export function ProgressCell({ progress }: { progress: JobProgress | null | undefined }) {
  if (!progress) return null;
  const view = progressView(progress);
  return (
    <div class="progress-cell" title={progressLine(view)} data-testid="job-progress-cell" {...data(progress, view)}>
      {view.percent !== null ? (
        <div class="row">
          <Bar view={view} />
          <span class="num">{view.percent}%</span>
        </div>
      ) : null}
      <div class="faint num nowrap">{cellLine(progress, view)}</div>
    </div>
  );
}

/** The job page's strip: a bar across, the percent, steps, epoch, rate, ETA and what keeps the
 * step still, if anything. */
export function RunProgress({ progress }: { progress: JobProgress | null | undefined }) {
  if (!progress) return null;
  const view = progressView(progress);
  const parts = [view.epoch, view.rate, view.eta].filter((part): part is string => part !== null);
  return (
    <section class="card run-progress" data-testid="run-progress" {...data(progress, view)}>
      <Bar view={view} />
      <div class="run-progress-line">
        {view.percent !== null ? (
          <b class="num" data-testid="run-progress-percent">
            {view.percent}%
          </b>
        ) : null}
        <span class="num" data-testid="run-progress-steps">
          {view.percent === null ? view.steps : `step ${view.steps}`}
        </span>
        {parts.map((part) => (
          <span class="num muted" key={part}>
            {part}
          </span>
        ))}
        {view.busy ? (
          <span class="tag" data-testid="run-progress-busy" title="What keeps the step from advancing now">
            {view.busy}
          </span>
        ) : null}
      </div>
    </section>
  );
}
