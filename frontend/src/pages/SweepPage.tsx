// One sweep: its state and why, Stop while it runs, the best trial, the objective over the
// trials, each parameter against the objective, the trials' learning curves (pruned ones grey
// and dashed, ending in a marker), and the trials with their parameters, to pick and compare.
import { useMemo, useState } from "preact/hooks";
import { getMe, onAccess, READ_ONLY, readOnlyIn } from "../api/access";
import { api } from "../api/client";
import { ActionOutcomes } from "../components/ActionOutcomes";
import { Card, ErrorState, Loading, StatusBadge } from "../components/common";
import { confirmAction } from "../components/ConfirmDialog";
import { KIND_STYLE, SweepChart, type SweepSeries } from "../components/SweepChart";
import {
  compareHash,
  curveColumns,
  objectiveColumns,
  paramColumns,
  parameterNames,
  paramText,
  reachedValue,
  sortTrials,
  stopConfirm,
  sweepProgress,
  toggled,
  type ChartColumns,
  type Sweep,
  type Trial,
} from "../data/sweeps";
import { useActionRunner } from "../hooks/useActionRunner";
import { useSweep } from "../hooks/useSweeps";
import { ago, duration, metric } from "../ui/format";
import { useNow, useSubscription } from "../ui/hooks";
import { href, navigate } from "../ui/router";

/** Why the caller may only look at a sweep of `project`, or null when they may stop it. */
function readOnlyWhy(project: string): string | null {
  const me = getMe();
  if (me === null || me.kind === "admin") return null;
  if (me.kind === "viewer") return READ_ONLY;
  return me.projects.find((p) => p.name === project)?.role === "viewer" ? readOnlyIn(project) : null;
}

export function SweepPage({ id }: { id: number }) {
  const { sweep, setSweep, error, load } = useSweep(id);
  const { outcomes, busy, run, dismiss } = useActionRunner(() => void load());
  const now = useNow(1000);
  useSubscription(onAccess);
  const [picked, setPicked] = useState<number[]>([]);

  if (!sweep) {
    if (error) {
      return (
        <ErrorState
          title={error.status === 404 ? `Sweep ${id} does not exist` : `Sweep ${id} could not be loaded`}
          detail={error.detail}
          retry={error.status === 404 ? undefined : () => void load()}
        />
      );
    }
    return <Loading what={`sweep ${id}`} />;
  }

  const stop = async () => {
    if (!(await confirmAction(stopConfirm(sweep)))) return;
    await run("stop", "Stopping the sweep…", async () => {
      const answer = await api.post("/sweeps/{sweep_id}/stop", { path: { sweep_id: sweep.id }, body: { reason: "stopped from the dashboard" } });
      setSweep(answer);
      return `Sweep ${answer.name} is ${answer.status}: no more trials start, the running ones are cancelled.`;
    });
  };
  const why = readOnlyWhy(sweep.project);
  const compare = compareHash(sweep.trials, picked);

  return (
    <div data-testid="sweep-page" data-sweep-id={sweep.id} data-status={sweep.status}>
      <div class="job-head">
        <SweepTitle sweep={sweep} now={now} />
        <div class="actions">
          {sweep.status === "running" || sweep.status === "stopping" ? (
            <button
              type="button"
              class="danger"
              onClick={stop}
              disabled={why !== null || sweep.status !== "running" || busy.has("stop")}
              title={why ?? (sweep.status === "stopping" ? "Stopping: its running trials are being cancelled" : "Start no more trials and cancel the running ones")}
              data-testid="stop-sweep"
            >
              {busy.has("stop") ? <span class="spinner" /> : null}
              {sweep.status === "stopping" ? "Stopping…" : "Stop sweep"}
            </button>
          ) : null}
        </div>
      </div>
      <ActionOutcomes outcomes={outcomes} now={now} dismiss={dismiss} />
      <div class="sweep-top">
        <BestCard sweep={sweep} />
        <ObjectiveChart sweep={sweep} />
      </div>
      <SweepCharts sweep={sweep} />
      <Card
        title="Trials"
        flush
        testid="trials-card"
        right={
          <div class="row" style={{ gap: "8px" }}>
            <span class="count">{sweep.trials.length}</span>
            <button
              type="button"
              class="small"
              disabled={compare === null}
              onClick={() => compare && navigate(compare)}
              title={compare === null ? "Tick two or more trials to compare their jobs" : "Their jobs' curves on the same charts, and how their specs differ"}
              data-testid="compare-trials"
            >
              Compare{picked.length ? ` (${picked.length})` : ""}
            </button>
          </div>
        }
      >
        <TrialsTable sweep={sweep} picked={picked} onPick={(n) => setPicked((list) => toggled(list, n))} now={now} />
      </Card>
    </div>
  );
}

function SweepTitle({ sweep, now }: { sweep: Sweep; now: number }) {
  const { ended, running, budget } = sweepProgress(sweep);
  const stopping = sweep.spec.early_stopping;
  return (
    <div class="job-title">
      <div class="line">
        <a href={href.sweeps()} class="muted">
          Sweeps
        </a>
        <span class="faint">/</span>
        <h1 data-testid="sweep-name">{sweep.name}</h1>
        <span class="faint num">#{sweep.id}</span>
        <StatusBadge status={sweep.status} testid="sweep-status" />
      </div>
      <div class="meta">
        <span data-testid="sweep-objective">
          {sweep.direction} <b class="mono">{sweep.objective}</b>
        </span>
        <span data-testid="sweep-progress" data-ended={ended} data-running={running} data-budget={budget}>
          {ended} of {budget} trials ended{running ? `, ${running} running` : ""} · {sweep.parallel} at a time
        </span>
        <span title="How trials' parameters are drawn">
          sampler {sweep.spec.sampler.type}
          {sweep.spec.sampler.seed !== null && sweep.spec.sampler.seed !== undefined ? ` (seed ${sweep.spec.sampler.seed})` : ""}
        </span>
        <span title="Early stopping" data-testid="sweep-early-stopping">
          {stopping.type === "none"
            ? "no early stopping"
            : `${stopping.type} by ${stopping.resource}${stopping.type === "median" ? "" : `, from ${stopping.min_resource}, 1 in ${stopping.reduction_factor} goes on`}`}
        </span>
        <span>project {sweep.project}</span>
        <span title={sweep.created_at}>
          created {ago(sweep.created_at, now)}
          {sweep.submitted_by ? ` by ${sweep.submitted_by}` : ""}
        </span>
        <span>
          {sweep.finished_at ? "ran" : "running for"}{" "}
          {duration(((sweep.finished_at ? Date.parse(sweep.finished_at) : now) - Date.parse(sweep.created_at)) / 1000)}
        </span>
      </div>
      {sweep.reason ? (
        <div class="reason" data-testid="sweep-reason">
          {sweep.reason}
        </div>
      ) : null}
    </div>
  );
}

function BestCard({ sweep }: { sweep: Sweep }) {
  const best = sweep.best;
  return (
    <Card title="Best trial" testid="best-trial" right={best ? <span class="count">#{best.number}</span> : null}>
      {best ? (
        <div class="best-trial" data-number={best.number} data-value={best.value ?? ""} data-job-id={best.job_id}>
          <div class="best-value">
            <span class="muted">{sweep.objective}</span>{" "}
            <b class="num" data-testid="best-value">
              {metric(best.value)}
            </b>
          </div>
          <div class="muted">
            trial <b data-testid="best-number">{best.number}</b> ·{" "}
            <a href={href.job(best.job_id)} data-testid="best-job">
              job #{best.job_id}
            </a>
          </div>
          <table class="kv" data-testid="best-params">
            <tbody>
              {Object.entries(best.params).map(([name, value]) => (
                <tr key={name} data-param={name}>
                  <td class="muted">{name}</td>
                  <td class="mono num">{paramText(value)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : (
        <div class="state compact">No trial has succeeded yet.</div>
      )}
    </Card>
  );
}

/** A chart's series from columns: each kind of point in its own colour. */
function pointSeries(columns: ChartColumns): SweepSeries[] {
  return columns.series.map((s) => {
    const style = KIND_STYLE[s.kind];
    return { label: s.label, values: s.values, color: style.color, line: style.line, points: style.line ? "none" : "all", width: 1.4 };
  });
}

function legendOf(series: SweepSeries[]) {
  return series.map((s) => ({ label: s.label, color: s.color, dash: s.dash !== undefined }));
}

function ObjectiveChart({ sweep }: { sweep: Sweep }) {
  const columns = useMemo(() => objectiveColumns(sweep.trials, sweep.direction), [sweep]);
  const series = pointSeries(columns);
  return (
    <SweepChart
      id="objective"
      title={`${sweep.objective} by trial`}
      x={columns.x}
      series={series}
      xName="trial"
      xWhole
      empty="No trial has reported the objective yet."
      legend={legendOf(series)}
    />
  );
}

function SweepCharts({ sweep }: { sweep: Sweep }) {
  const names = parameterNames(sweep.spec, sweep.trials);
  const curves = useMemo(() => curveColumns(sweep.trials), [sweep]);
  const unit = sweep.resource === "epochs" ? "epoch" : "step";
  const curveSeries: SweepSeries[] = curves.series.map((s, i) => {
    const trial = curves.trials[i] as Trial;
    const kind = trial.status === "stopped" ? "failed" : trial.status;
    if (kind === "pruned") return { label: s.label, values: s.values, color: "grey", line: true, points: "last", dash: [5, 4], width: 1.3 };
    if (kind === "failed") return { label: s.label, values: s.values, color: "#d23c3c", line: true, points: "last", dash: [2, 3], width: 1.3 };
    return { label: s.label, values: s.values, color: trial.number, line: true, points: kind === "running" ? "last" : "none", width: 1.8 };
  });
  return (
    <div class="charts sweep-charts" data-testid="sweep-charts">
      <SweepChart
        id="curves"
        title={`${sweep.objective} by ${unit}, each trial`}
        x={curves.x}
        series={curveSeries}
        xName={unit}
        xWhole
        empty="No trial has reported an intermediate value yet."
        legend={[
          { label: "ran to the end", color: 0 },
          { label: "pruned (● where it stopped)", color: "grey", dash: true },
        ]}
      />
      {names.map((name) => (
        <ParamChart key={name} sweep={sweep} name={name} />
      ))}
    </div>
  );
}

function ParamChart({ sweep, name }: { sweep: Sweep; name: string }) {
  const parameter = sweep.spec.parameters[name];
  const columns = useMemo(() => paramColumns(sweep.trials, name, parameter), [sweep, name]);
  const series = pointSeries(columns);
  return (
    <SweepChart
      id={`param-${name.replace(/[^A-Za-z0-9_-]/g, "-")}`}
      title={`${sweep.objective} by ${name}${columns.log ? " (log)" : ""}`}
      x={columns.x}
      series={series}
      xName={name}
      xLabels={columns.labels}
      xLog={columns.log}
      empty="No trial has reported the objective yet."
      legend={legendOf(series)}
    />
  );
}

function TrialsTable({ sweep, picked, onPick, now }: { sweep: Sweep; picked: number[]; onPick: (n: number) => void; now: number }) {
  const names = parameterNames(sweep.spec, sweep.trials);
  const trials = sortTrials(sweep.trials);
  const unit = sweep.resource === "epochs" ? "epoch" : "step";
  if (trials.length === 0) return <div class="state compact">No trial has started yet.</div>;
  return (
    <div class="table-scroll">
      <table class="data" data-testid="trials-table">
        <thead>
          <tr>
            <th class="pick" title="Tick trials to compare their jobs" />
            <th>Trial</th>
            <th>Status</th>
            {names.map((name) => (
              <th key={name} class="mono" data-testid="param-column">
                {name}
              </th>
            ))}
            <th title={`The final ${sweep.objective}; for a trial that did not finish, its last intermediate value`}>{sweep.objective}</th>
            <th title={`The last ${unit} it reported`}>{unit === "epoch" ? "Epochs" : "Steps"}</th>
            <th>Job</th>
            <th>Ran</th>
          </tr>
        </thead>
        <tbody>
          {trials.map((trial) => {
            const reached = reachedValue(trial);
            const last = trial.curve[trial.curve.length - 1];
            const best = sweep.best?.number === trial.number;
            const ran = (trial.finished_at ? Date.parse(trial.finished_at) : now) - Date.parse(trial.created_at);
            return (
              <tr
                key={trial.number}
                class={best ? "best" : ""}
                data-testid="trial-row"
                data-number={trial.number}
                data-status={trial.status}
                data-job-id={trial.job_id}
                data-value={trial.value ?? ""}
              >
                <td class="pick">
                  <input
                    type="checkbox"
                    checked={picked.includes(trial.number)}
                    onChange={() => onPick(trial.number)}
                    aria-label={`Compare trial ${trial.number}`}
                    data-testid="trial-pick"
                  />
                </td>
                <td class="num">
                  <b>{trial.number}</b>
                  {best ? (
                    <span class="tag best-tag" title="The best trial" data-testid="best-tag">
                      best
                    </span>
                  ) : null}
                </td>
                <td>
                  <StatusBadge status={trial.status} testid="trial-status" />
                  {trial.reason ? (
                    <div class="muted small-text" data-testid="trial-reason" title={trial.reason}>
                      {trial.reason}
                    </div>
                  ) : null}
                </td>
                {names.map((name) => (
                  <td key={name} class="mono num" data-param={name}>
                    {paramText(trial.params[name])}
                  </td>
                ))}
                <td class="num" data-testid="trial-value" title={trial.value === null && reached !== null ? `its last intermediate value` : undefined}>
                  {trial.value !== null ? <b>{metric(trial.value)}</b> : reached !== null ? <span class="faint">{metric(reached)}</span> : <span class="faint">–</span>}
                </td>
                <td class="num muted">{last ? last[0] : "–"}</td>
                <td class="nowrap">
                  <a href={href.job(trial.job_id)} data-testid="trial-job">
                    #{trial.job_id}
                  </a>{" "}
                  <span class="faint small-text">{trial.job_status}</span>
                </td>
                <td class="num muted nowrap">{duration(ran / 1000)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
