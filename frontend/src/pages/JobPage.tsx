// One job: header and controls, its progress while it runs, topology, live charts, events,
// checkpoints and logs.
import { useEffect, useRef, useState } from "preact/hooks";
import { onAccess, readOnlyReason } from "../api/access";
import { isFinished } from "../api/types";
import { ActionOutcomes } from "../components/ActionOutcomes";
import { CheckpointsTable } from "../components/CheckpointsTable";
import { CodeBundleCard } from "../components/CodeBundle";
import { Card, ErrorState, Loading } from "../components/common";
import { EventsTimeline } from "../components/EventsTimeline";
import { JobActionsBar } from "../components/JobActionsBar";
import { JobCharts } from "../components/JobCharts";
import { JobTitle } from "../components/JobTitle";
import { LogViewer } from "../components/LogViewer";
import { RunProgress } from "../components/RunProgress";
import { Topology } from "../components/Topology";
import { sortSeries } from "../data/jobCharts";
import { progressSummary } from "../data/jobProgress";
import { slowWorkers } from "../data/stragglers";
import { useHostStatus } from "../hooks/useHostStatus";
import { useJobActions } from "../hooks/useJobActions";
import { useJobLive } from "../hooks/useJobLive";
import { useNow, useSubscription } from "../ui/hooks";

export function JobPage({ id, task: routeTask }: { id: number; task: string | null }) {
  const live = useJobLive(id);
  const now = useNow(1000);
  useSubscription(onAccess);
  const job = live.job;
  // Why the caller may only look at this job (a viewer token, or a viewer of its project).
  const readOnlyWhy = job ? readOnlyReason(job.project_id) : null;
  const controls = useJobActions(live);
  const hostStatus = useHostStatus();
  const [selected, setSelected] = useState<string | null>(routeTask);
  const logRef = useRef<HTMLDivElement>(null);

  useEffect(() => setSelected(routeTask), [routeTask]);
  useEffect(() => {
    if (selected === null && job && job.tasks.length) {
      setSelected((job.tasks.find((t) => t.role === "chief") ?? job.tasks[0])?.name ?? null);
    }
  }, [job, selected]);

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
  const series = sortSeries(live.series.all());
  // While the runtime reports progress, its strip says step, epoch and rate: the title adds the loss.
  const summary = progressSummary(series, { steps: !job.progress });

  return (
    <div data-testid="job-page" data-job-id={job.id} data-status={job.status}>
      <div class="job-head">
        <JobTitle job={job} progress={summary} now={now} />
        <JobActionsBar job={job} controls={controls} readOnlyWhy={readOnlyWhy} />
      </div>

      <RunProgress progress={job.progress} />

      <ActionOutcomes outcomes={controls.outcomes} now={now} dismiss={controls.dismiss} />

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
                onRestart={job.actions.task_restart && readOnlyWhy === null ? controls.restartTask : null}
                busy={controls.busy}
                usage={live.usage}
                slow={slowWorkers(live.events, job.tasks)}
              />
            ) : (
              <div class="state compact">This job has no tasks.</div>
            )}
          </Card>
          <JobCharts series={series} historyDone={live.historyDone} finished={finished} />
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
