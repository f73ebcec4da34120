// Sweeps: each search with its state, objective, how many of its trials ended and the best
// value so far; read again every 2 s while one runs. A click opens the sweep.
import { Empty, ErrorState, Loading, StatusBadge } from "../components/common";
import { progressText, sortSweeps, sweepProgress, type SweepSummary } from "../data/sweeps";
import { useSweepsList } from "../hooks/useSweeps";
import { ago, metric } from "../ui/format";
import { useNow, useSubscription } from "../ui/hooks";
import { currentProject, onProjectChange } from "../ui/project";
import { href, navigate } from "../ui/router";

export function SweepsPage() {
  useSubscription(onProjectChange);
  const project = currentProject();
  const { sweeps, error, load } = useSweepsList(project);
  const now = useNow(1000);
  const list = sweeps ? sortSweeps(sweeps) : [];
  return (
    <div data-testid="sweeps-page">
      <div class="page-head">
        <h1>Sweeps</h1>
        {sweeps ? (
          <span class="count" data-testid="sweeps-total">
            {sweeps.length}
          </span>
        ) : null}
        <span class="sub">Hyperparameter searches; each trial is a job. Start one with strata sweep create.</span>
      </div>
      <section class="card">
        {error && !sweeps ? (
          <ErrorState title="Sweeps could not be loaded" detail={error.detail} retry={() => void load()} />
        ) : !sweeps ? (
          <Loading what="sweeps" />
        ) : list.length === 0 ? (
          <Empty title={project ? `No sweep in project ${project}` : "No sweep yet"}>
            Create one with <code>strata sweep create examples/digits_sweep.yaml</code>.
          </Empty>
        ) : (
          <div class="table-scroll">
            <table class="data" data-testid="sweeps-table">
              <thead>
                <tr>
                  <th>ID</th>
                  <th>Name</th>
                  <th>Project</th>
                  <th>Status</th>
                  <th>Objective</th>
                  <th title="Trials ended of the budget, and those running">Progress</th>
                  <th>Best</th>
                  <th>Created</th>
                </tr>
              </thead>
              <tbody>
                {list.map((sweep) => (
                  <SweepRow key={sweep.id} sweep={sweep} now={now} />
                ))}
              </tbody>
            </table>
          </div>
        )}
        {error && sweeps ? <div class="notice" style={{ margin: "10px" }}>Refresh failed: {error.detail}</div> : null}
      </section>
    </div>
  );
}

function SweepRow({ sweep, now }: { sweep: SweepSummary; now: number }) {
  const { ended, running, budget } = sweepProgress(sweep);
  const c = sweep.counts;
  return (
    <tr data-testid="sweep-row" data-sweep-id={sweep.id} data-status={sweep.status} onClick={() => navigate(href.sweep(sweep.id))} style={{ cursor: "pointer" }}>
      <td class="num muted">#{sweep.id}</td>
      <td>
        <a href={href.sweep(sweep.id)} onClick={(e) => e.stopPropagation()} data-testid="sweep-link">
          <b>{sweep.name}</b>
        </a>
        {sweep.reason ? (
          <div class="muted small-text" style={{ maxWidth: "380px", overflow: "hidden", textOverflow: "ellipsis", whiteSpace: "nowrap" }} title={sweep.reason}>
            {sweep.reason}
          </div>
        ) : null}
      </td>
      <td class="nowrap" title={sweep.submitted_by ? `submitted by ${sweep.submitted_by}` : undefined}>
        {sweep.project}
      </td>
      <td>
        <StatusBadge status={sweep.status} />
      </td>
      <td class="nowrap" data-testid="sweep-objective">
        <span class="mono">{sweep.objective}</span> <span class="muted">{sweep.direction === "minimize" ? "↓ min" : "↑ max"}</span>
      </td>
      <td
        class="nowrap num"
        data-testid="sweep-progress"
        data-ended={ended}
        data-running={running}
        data-budget={budget}
        title={`${c.succeeded} succeeded, ${c.pruned} pruned, ${c.failed} failed, ${c.stopped} stopped, ${c.running} running`}
      >
        <span class="row nowrap" style={{ gap: "8px" }}>
          <span class="bar" role="progressbar" aria-valuemin={0} aria-valuemax={budget} aria-valuenow={ended}>
            <i style={{ width: `${budget ? Math.round((100 * ended) / budget) : 0}%` }} />
          </span>
          {progressText(sweep)}
        </span>
        {c.pruned ? <div class="faint small-text">{c.pruned} pruned</div> : null}
      </td>
      <td class="num" data-testid="sweep-best" data-value={sweep.best?.value ?? ""}>
        {sweep.best ? (
          <span title={`trial ${sweep.best.number}`}>
            <b>{metric(sweep.best.value)}</b> <span class="faint">trial {sweep.best.number}</span>
          </span>
        ) : (
          <span class="faint">–</span>
        )}
      </td>
      <td class="muted nowrap" title={sweep.created_at}>
        {ago(sweep.created_at, now)}
      </td>
    </tr>
  );
}
