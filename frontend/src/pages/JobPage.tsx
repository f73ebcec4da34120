// One job: header and controls, topology, live charts, events, checkpoints and logs.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { onAccess, readOnlyReason } from "../api/access";
import { ApiError, api, tensorBoardUrl } from "../api/client";
import { signalUnauthorized } from "../api/auth";
import { isFinished, type Job, type Task } from "../api/types";
import { CheckpointsTable } from "../components/CheckpointsTable";
import { CodeBundleCard } from "../components/CodeBundle";
import { Card, ErrorState, Loading, StatusBadge } from "../components/common";
import { confirmAction } from "../components/ConfirmDialog";
import { EventsTimeline } from "../components/EventsTimeline";
import { LogViewer } from "../components/LogViewer";
import { MetricChart } from "../components/MetricChart";
import { epochChartNote } from "../data/chartNotes";
import { Topology } from "../components/Topology";
import { JobLive } from "../data/jobLive";
import type { Series } from "../data/series";
import { setConnection } from "../ui/connection";
import { ago, bytes, duration, metric } from "../ui/format";
import { useNow, useSubscription } from "../ui/hooks";
import { href } from "../ui/router";

interface ChartSpec {
  id: string;
  title: string;
  match: (name: string) => boolean;
  empty: string;
  points?: boolean;
  hideEmpty?: boolean;
  label?: (s: Series) => string;
}

const HIDDEN = new Set(["epoch", "lr", "examples_per_sec"]);
const CHARTS: ChartSpec[] = [
  { id: "loss", title: "Loss", match: (n) => n === "loss" || n === "val_loss", empty: "Waiting for the first epoch to end…", points: true },
  {
    id: "metrics",
    title: "Epoch metrics",
    match: (n) => !n.includes("/") && !HIDDEN.has(n) && n !== "loss" && n !== "val_loss" && n !== "steps_per_sec",
    empty: "Waiting for the first epoch to end…",
    points: true,
  },
  { id: "batch", title: "Batch progress", match: (n) => n.startsWith("batch/"), empty: "No batch metrics yet." },
  { id: "throughput", title: "Steps / s", match: (n) => n === "steps_per_sec", empty: "No throughput measured yet." },
  {
    id: "closures",
    title: "Closures done per worker",
    match: (n) => /^worker:\d+\/closures_done$/.test(n),
    empty: "Parameter-server jobs report each worker's closures here.",
    label: (s) => s.name.split("/")[0] ?? s.name,
  },
  {
    id: "eval",
    title: "Evaluation by checkpoint step",
    match: (n) => n.startsWith("eval/"),
    empty: "Start the sidecar evaluator to evaluate each checkpoint.",
    points: true,
  },
  {
    id: "coordinator",
    title: "Coordinator queue",
    match: (n) => n === "coordinator/queue_depth" || n === "coordinator/inflight",
    empty: "",
    hideEmpty: true,
  },
];
const CLAIMED = (name: string) =>
  HIDDEN.has(name) || name.startsWith("coordinator/") || /^worker:\d+\//.test(name) || CHARTS.some((c) => c.match(name));
const OTHER: ChartSpec = { id: "other", title: "Other metrics", match: (n) => !CLAIMED(n), empty: "", hideEmpty: true };

type OutcomeState = "pending" | "ok" | "error";
interface Outcome {
  id: number;
  action: string;
  state: OutcomeState;
  text: string;
  started: number;
  /** When it reached its state: a success fades out after a minute, errors stay. */
  at: number;
}
const OK_SHOWN_MS = 60_000;

let outcomeIds = 0;

export function JobPage({ id, task: routeTask }: { id: number; task: string | null }) {
  const live = useMemo(() => new JobLive(id), [id]);
  const subscribe = useMemo(() => live.subscribe.bind(live), [live]);
  useSubscription(subscribe);
  useEffect(() => {
    live.start();
    return () => {
      live.stop();
      setConnection(null);
    };
  }, [live]);
  useEffect(() => setConnection(live.stream), [live.stream]);
  useEffect(() => {
    if (live.fatal && /token/i.test(live.fatal)) signalUnauthorized(`The server refused the token: ${live.fatal}`);
  }, [live.fatal]);

  const now = useNow(1000);
  useSubscription(onAccess);
  // Why the caller may only look at this job (a viewer token, or a viewer of its project).
  const readOnlyWhy = live.job ? readOnlyReason(live.job.project_id) : null;
  const readOnly = readOnlyWhy !== null;
  const [selected, setSelected] = useState<string | null>(routeTask);
  const [outcomes, setOutcomes] = useState<Outcome[]>([]);
  const [busy, setBusy] = useState<Set<string>>(new Set());
  const [hostStatus, setHostStatus] = useState<Map<string, string>>(new Map());
  const logRef = useRef<HTMLDivElement>(null);
  const job = live.job;

  useEffect(() => setSelected(routeTask), [routeTask]);
  useEffect(() => {
    if (selected === null && job && job.tasks.length) {
      setSelected((job.tasks.find((t) => t.role === "chief") ?? job.tasks[0])?.name ?? null);
    }
  }, [job, selected]);

  // Host health for the topology, refreshed while the page is open.
  useEffect(() => {
    let stop = false;
    const load = async () => {
      try {
        const hosts = await api.get("/hosts");
        if (!stop) setHostStatus(new Map(hosts.map((h) => [h.name, h.status])));
      } catch {
        /* the topology works without it */
      }
    };
    void load();
    const timer = setInterval(load, 10_000);
    return () => {
      stop = true;
      clearInterval(timer);
    };
  }, []);

  function report(action: string, state: OutcomeState, text: string, outcomeId?: number): number {
    const key = outcomeId ?? ++outcomeIds;
    setOutcomes((list) => {
      const others = list.filter((o) => o.id !== key && !(o.action === action && o.state !== "pending"));
      const started = list.find((o) => o.id === key)?.started ?? Date.now();
      return [{ id: key, action, state, text, started, at: Date.now() }, ...others].slice(0, 4);
    });
    return key;
  }

  async function run(action: string, pending: string, call: () => Promise<string>, busyKey = action) {
    const key = report(action, "pending", pending);
    setBusy((s) => new Set(s).add(busyKey));
    try {
      report(action, "ok", await call(), key);
    } catch (error) {
      const detail = error instanceof ApiError ? `${error.detail}${error.status ? ` (${error.status})` : ""}` : String(error);
      report(action, "error", detail, key);
    } finally {
      setBusy((s) => {
        const next = new Set(s);
        next.delete(busyKey);
        return next;
      });
      live.refresh();
    }
  }

  const path = { job_id: id };
  const applyJob = (j: Job) => live.setJob(j);

  const checkpointNow = () =>
    run("checkpoint", "Checkpoint requested: waiting for the chief to write it…", async () => {
      const answer = await api.post("/jobs/{job_id}/checkpoint", { path });
      const c = answer.checkpoint;
      live.checkpoints.set(c.name, c);
      return `Checkpoint ${c.name} written by ${answer.task} at step ${c.step ?? "?"}${c.epoch !== null ? ` (epoch ${c.epoch})` : ""}, ${bytes(c.size_bytes)}, in ${answer.seconds.toFixed(2)} s.`;
    });

  // What the controls may do comes from the server (job.actions), not from rules kept here.
  const evaluatorLive = job?.actions.evaluator_stop ?? false;
  const toggleEvaluator = () => {
    const action = evaluatorLive ? "stop" : "start";
    return run(
      "evaluator",
      action === "start" ? "Starting the sidecar evaluator…" : "Stopping the sidecar evaluator…",
      async () => {
        const j = await api.post("/jobs/{job_id}/evaluator", { path, body: { action } });
        applyJob(j);
        const t = j.tasks.find((x) => x.role === "evaluator");
        return action === "start"
          ? `Sidecar evaluator ${t?.status ?? "requested"}${t?.host ? ` on ${t.host}` : ""}; it evaluates each new checkpoint.`
          : "Sidecar evaluator stopped.";
      },
    );
  };

  const restartJob = async () => {
    const ok = await confirmAction({
      title: `Restart job ${job?.name ?? id}?`,
      body: "Every task stops and the job is placed again; training resumes from its last backup.",
      confirmLabel: "Restart job",
      danger: true,
    });
    if (!ok) return;
    await run("restart", "Restarting the job…", async () => {
      const j = await api.post("/jobs/{job_id}/restart", { path });
      applyJob(j);
      return `Job restart requested: ${j.status}${j.reason ? ` (${j.reason})` : ""}.`;
    });
  };

  const cancelJob = async () => {
    const ok = await confirmAction({
      title: `Cancel job ${job?.name ?? id}?`,
      body: "Its tasks are stopped. A cancelled job cannot be resumed.",
      confirmLabel: "Cancel job",
      danger: true,
    });
    if (!ok) return;
    await run("cancel", "Cancelling the job…", async () => {
      const j = await api.post("/jobs/{job_id}/cancel", { path });
      applyJob(j);
      return `Job ${j.status}.`;
    });
  };

  const restartTask = async (task: Task) => {
    const ok = await confirmAction({
      title: `Restart ${task.name}?`,
      body:
        job?.strategy === "parameter_server" && task.role === "worker"
          ? `${task.name} restarts alone on ${task.host ?? "its host"}:${task.port ?? "?"}; the coordinator carries on without it meanwhile.`
          : `${task.name} restarts in place, with the tasks its role restarts along with it.`,
      confirmLabel: `Restart ${task.name}`,
      danger: true,
    });
    if (!ok) return;
    await run(
      `restart ${task.name}`,
      `Restarting ${task.name}…`,
      async () => {
        const j = await api.post("/jobs/{job_id}/tasks/{task}/restart", { path: { job_id: id, task: task.name } });
        applyJob(j);
        const t = j.tasks.find((x) => x.name === task.name);
        return `${task.name} restart requested (attempt ${t?.attempt ?? "?"}, ${t?.status ?? "?"}).`;
      },
      task.name,
    );
  };

  if (!job) {
    if (live.jobError) {
      return (
        <ErrorState
          title={live.jobError.status === 404 ? `Job ${id} does not exist` : `Job ${id} could not be loaded`}
          detail={live.jobError.detail}
          retry={live.jobError.status === 404 ? undefined : () => void live.loadJob()}
        />
      );
    }
    return <Loading what={`job ${id}`} />;
  }

  const finished = isFinished(job.status);
  const shownOutcomes = outcomes.filter((o) => o.state !== "ok" || now - o.at < OK_SHOWN_MS);
  const { actions } = job;
  const canToggleEvaluator = evaluatorLive ? actions.evaluator_stop : actions.evaluator_start;
  const series = live.series.all().sort((a, b) => a.name.localeCompare(b.name) || a.task.localeCompare(b.task));
  const progress = summary(series);
  const charts = [...CHARTS, OTHER]
    .map((spec) => ({ spec, list: series.filter((s) => spec.match(s.name)) }))
    .filter(({ spec, list }) => !spec.hideEmpty || list.length > 0);

  return (
    <div data-testid="job-page" data-job-id={job.id} data-status={job.status}>
      <div class="job-head">
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
        <div class="actions">
          <a
            class="button"
            href={tensorBoardUrl(`/jobs/${job.id}/tensorboard/`)}
            target="_blank"
            rel="noopener"
            title="This job's TensorBoard (the server starts it; its event files are under the checkpoint dir)"
            data-testid="tensorboard-link"
          >
            TensorBoard
          </a>
          <button
            type="button"
            onClick={checkpointNow}
            disabled={readOnly || !actions.checkpoint || busy.has("checkpoint")}
            title={
              readOnlyWhy ??
              (actions.checkpoint
                ? "Ask the chief to write a checkpoint now"
                : "Only while a parameter_server or mirrored job runs")
            }
            data-testid="checkpoint-now"
          >
            {busy.has("checkpoint") ? <span class="spinner" /> : null}
            Checkpoint now
          </button>
          <button
            type="button"
            onClick={toggleEvaluator}
            disabled={readOnly || !canToggleEvaluator || busy.has("evaluator")}
            title={
              readOnlyWhy ??
              (canToggleEvaluator
                ? "The sidecar evaluator evaluates each new checkpoint"
                : "Only while the job is unfinished and writes checkpoints")
            }
            data-testid="evaluator-toggle"
            data-running={evaluatorLive ? "true" : "false"}
          >
            {busy.has("evaluator") ? <span class="spinner" /> : null}
            {evaluatorLive ? "Stop evaluator" : "Start evaluator"}
          </button>
          <button
            type="button"
            class="danger"
            onClick={restartJob}
            disabled={readOnly || !actions.restart || busy.has("restart")}
            title={readOnlyWhy ?? undefined}
            data-testid="restart-job"
          >
            {busy.has("restart") ? <span class="spinner" /> : null}
            Restart job
          </button>
          <button
            type="button"
            class="danger"
            onClick={cancelJob}
            disabled={readOnly || !actions.cancel || busy.has("cancel")}
            title={readOnlyWhy ?? undefined}
            data-testid="cancel-job"
          >
            {busy.has("cancel") ? <span class="spinner" /> : null}
            Cancel
          </button>
        </div>
      </div>

      {shownOutcomes.length ? (
        <div class="outcomes" aria-live="polite">
          {shownOutcomes.map((o) => (
            <div class={`outcome ${o.state}`} key={o.id} data-testid="action-outcome" data-action={o.action} data-state={o.state}>
              {o.state === "pending" ? <span class="spinner" /> : <b>{o.state === "ok" ? "✓" : "✕"}</b>}
              <span>{o.text}</span>
              {o.state === "pending" ? <span class="faint num">{Math.floor((now - o.started) / 1000)} s</span> : null}
              {o.state !== "pending" ? (
                <button type="button" class="small ghost dismiss" onClick={() => setOutcomes((l) => l.filter((x) => x.id !== o.id))} aria-label="Dismiss">
                  ✕
                </button>
              ) : null}
            </div>
          ))}
        </div>
      ) : null}

      <div class="job-grid">
        <div class="job-main">
          <Card title="Topology" right={<span class="muted" style={{ fontSize: "12px" }}>tasks by host · click a task for its log</span>}>
            {job.tasks.length ? (
              <Topology
                tasks={job.tasks}
                hostStatus={hostStatus}
                selected={selected}
                onSelect={(name) => {
                  setSelected(name);
                  logRef.current?.scrollIntoView({ behavior: "smooth", block: "nearest" });
                }}
                onRestart={actions.task_restart && !readOnly ? restartTask : null}
                busy={busy}
                usage={live.usage}
              />
            ) : (
              <div class="state compact">This job has no tasks.</div>
            )}
          </Card>
          <div class="charts" data-testid="charts">
            {charts.map(({ spec, list }) => {
              const tasks = new Set(list.map((s) => s.task));
              const label = spec.label ?? ((s: Series) => (tasks.size > 1 ? `${s.name} · ${s.task}` : s.name));
              return (
                <MetricChart
                  key={spec.id}
                  id={spec.id}
                  title={spec.title}
                  series={list}
                  label={label}
                  empty={
                    !live.historyDone
                      ? "Loading metrics…"
                      : spec.id === "loss" || spec.id === "metrics"
                        ? epochChartNote(spec.id, series.map((s) => s.name), finished)
                        : spec.empty
                  }
                  points={spec.points}
                />
              );
            })}
          </div>
        </div>
        <div class="job-side">
          {job.spec.code ? <CodeBundleCard sha256={job.spec.code.sha256} /> : null}
          <Card
            title="Events"
            flush
            right={<span class="count">{live.events.length}</span>}
            testid="events-card"
          >
            <EventsTimeline events={live.events} loading={!live.historyDone} />
          </Card>
          <Card title="Checkpoints" flush right={<span class="count">{live.checkpointList().length}</span>} testid="checkpoints-card">
            <CheckpointsTable rows={live.checkpointList()} loading={!live.checkpointsLoaded} error={live.checkpointsError} />
          </Card>
        </div>
      </div>
      <div ref={logRef} style={{ marginTop: "14px" }}>
        <LogViewer jobId={id} tasks={job.tasks} logs={live.logs} task={selected} onTask={setSelected} version={live.version} />
      </div>
    </div>
  );
}

/** "epoch 4 · step 80 · loss 0.31 · 12 steps/s" from the newest points. */
function summary(series: Series[]): string {
  const find = (name: string) => series.find((s) => s.name === name && s.length > 0);
  const parts: string[] = [];
  const epoch = find("epoch");
  if (epoch) parts.push(`epoch ${metric(epoch.latest())}`);
  const steps = series.reduce((m, s) => (s.length && !s.name.startsWith("eval/") ? Math.max(m, s.steps[s.length - 1] as number) : m), -1);
  if (steps >= 0) parts.push(`step ${steps}`);
  const loss = find("loss") ?? find("batch/loss");
  if (loss) parts.push(`loss ${metric(loss.latest())}`);
  const rate = find("steps_per_sec");
  if (rate) parts.push(`${metric(rate.latest())} steps/s`);
  return parts.join(" · ");
}
