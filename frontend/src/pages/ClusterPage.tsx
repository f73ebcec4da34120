// The cluster: hosts with their health, drain state and heartbeat age, their devices and which
// task holds each, refreshed every few seconds and whenever a job event arrives; an admin
// drains a host or puts it back in service from its card.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { getAccess, onAccess } from "../api/access";
import { ApiError, api, websocketUrl } from "../api/client";
import { signalUnauthorized } from "../api/auth";
import type { Cluster, Host, HostUsage } from "../api/types";
import { ActionOutcomes } from "../components/ActionOutcomes";
import { Empty, ErrorState, Loading, StatusBadge } from "../components/common";
import { CordonBadge, UncordonButton } from "../components/HostCordon";
import { DrainBadge, DrainButton } from "../components/HostDrain";
import { GpuUsage, TaskUsage, taskFigures } from "../components/Usage";
import { drainState, hostControlsReadOnly } from "../data/hostDrain";
import { debounce } from "../data/schedule";
import { type HostDrain, useHostDrain } from "../hooks/useHostDrain";
import { StreamClient } from "../stream/client";
import { setConnection } from "../ui/connection";
import { duration } from "../ui/format";
import { useNow, useSubscription } from "../ui/hooks";
import { href } from "../ui/router";

const POLL_MS = 3_000;

export function ClusterPage() {
  const [cluster, setCluster] = useState<Cluster | null>(null);
  // GET /hosts by name: the drain state, which the cluster board does not carry.
  const [hosts, setHosts] = useState<Map<string, Host>>(new Map());
  const [loadedAt, setLoadedAt] = useState(0);
  const [error, setError] = useState<ApiError | null>(null);
  const now = useNow(1000);
  useSubscription(onAccess);
  const inFlight = useRef(false);
  const again = useRef(false);
  const drainAnswers = useRef(0);

  const load = useCallback(async () => {
    if (inFlight.current) {
      again.current = true; // a read asked for after a change must not be dropped
      return;
    }
    inFlight.current = true;
    const answersBefore = drainAnswers.current;
    try {
      const [board, found] = await Promise.all([api.get("/cluster"), api.get("/hosts")]);
      setCluster(board);
      // A drain answered while this read was under way is newer than what it read.
      if (drainAnswers.current === answersBefore) setHosts(new Map(found.map((h) => [h.name, h])));
      setLoadedAt(Date.now());
      setError(null);
    } catch (e) {
      setError(e instanceof ApiError ? e : new ApiError(0, null, String(e)));
    } finally {
      inFlight.current = false;
      if (again.current) {
        again.current = false;
        void load();
      }
    }
  }, []);

  const drain = useHostDrain(
    () => void load(),
    (host) => {
      drainAnswers.current += 1;
      setHosts((known) => new Map(known).set(host.name, host));
    },
  );
  const readOnlyWhy = hostControlsReadOnly(getAccess());

  useEffect(() => {
    void load();
    const timer = setInterval(() => void load(), POLL_MS);
    const refetch = debounce(() => void load(), 300);
    const stream = new StreamClient({
      url: () => websocketUrl("/stream"),
      onFrame: (frame) => {
        if (frame.type === "event") refetch();
      },
      onState: setConnection,
      onFatal: (reason, auth) => auth && signalUnauthorized(`The server refused the token: ${reason}`),
    });
    stream.start();
    return () => {
      clearInterval(timer);
      refetch.cancel();
      stream.stop();
      setConnection(null);
    };
  }, [load]);

  if (!cluster) {
    return error ? (
      <ErrorState title="The cluster could not be loaded" detail={error.detail} retry={() => void load()} />
    ) : (
      <Loading what="the cluster" />
    );
  }
  const { totals } = cluster;
  // Heartbeat ages were measured when the answer was made: add the time since.
  const drift = Math.max(0, (now - loadedAt) / 1000);
  return (
    <div data-testid="cluster-page">
      <div class="page-head">
        <h1>Cluster</h1>
        <span class="sub">
          {totals.online_hosts} of {totals.hosts} hosts online
        </span>
        <div class="grow" />
        {error ? <span class="error-text" style={{ fontSize: "13px" }}>Refresh failed: {error.detail}</span> : null}
      </div>
      <ActionOutcomes outcomes={drain.outcomes} now={now} dismiss={drain.dismiss} />
      <div class="totals">
        <Stat label="Hosts online" value={`${totals.online_hosts} / ${totals.hosts}`} />
        <Stat label="GPUs free" value={`${totals.free_gpus} / ${totals.gpus}`} bar={totals.gpus ? (totals.gpus - totals.free_gpus) / totals.gpus : 0} />
        <Stat label="GPUs in use" value={String(totals.gpus - totals.free_gpus)} />
        <Stat label="Live tasks" value={String(totals.live_tasks)} />
      </div>
      {cluster.hosts.length === 0 ? (
        <section class="card">
          <Empty title="No host has joined">Start an agent: strata agent --server URL --token T</Empty>
        </section>
      ) : (
        <div class="host-cards">
          {cluster.hosts.map((host) => (
            <HostCard
              key={host.name}
              host={host}
              drainable={hosts.get(host.name)}
              drain={drain}
              readOnlyWhy={readOnlyWhy}
              age={host.heartbeat_age_seconds + (host.status === "online" ? drift : 0)}
            />
          ))}
        </div>
      )}
    </div>
  );
}

function Stat({ label, value, bar }: { label: string; value: string; bar?: number }) {
  return (
    <div class="card stat">
      <div class="label">{label}</div>
      <div class="value">{value}</div>
      {bar !== undefined ? (
        <div class="bar" style={{ marginTop: "6px" }}>
          <i style={{ width: `${Math.round(bar * 100)}%` }} />
        </div>
      ) : null}
    </div>
  );
}

function heartbeatClass(age: number, status: string): string {
  if (status !== "online") return "hb-dead";
  if (age < 3) return "hb-ok";
  return age < 6 ? "hb-late" : "hb-dead";
}

// The container engine its agent can run `environment.image` jobs in; a host without one
// takes only jobs that run in the agent's own (or another installed) interpreter.
function EngineTag({ engine }: { engine: HostUsage["engine"] }) {
  if (!engine) {
    return (
      <span class="faint" style={{ fontSize: "12px" }} data-testid="host-engine" title="Jobs with environment.image are not placed here">
        no container engine
      </span>
    );
  }
  const images = engine.images ?? [];
  const title = images.length ? `${images.length} images present:\n${images.join("\n")}` : "No images present yet (pulled when a task needs one)";
  return (
    <span class="tag mono" data-testid="host-engine" title={title}>
      {engine.kind} {engine.version}
      {engine.nvidia ? " · nvidia" : ""}
    </span>
  );
}

function HostCard({
  host,
  drainable,
  drain,
  readOnlyWhy,
  age,
}: {
  host: HostUsage;
  /** The host as GET /hosts read it; undefined until read. */
  drainable: Host | undefined;
  drain: HostDrain;
  readOnlyWhy: string | null;
  age: number;
}) {
  const gpus = host.devices;
  const cpuTasks = host.tasks.filter((t) => t.gpus.length === 0);
  return (
    <section class="card" data-testid="host-card" data-host={host.name} data-status={host.status} data-drain={drainable ? drainState(drainable) : undefined}>
      <div class="card-head">
        <h2>{host.name}</h2>
        <StatusBadge status={host.status} testid="host-status" />
        {drainable ? <DrainBadge host={drainable} /> : null}
        {drainable ? <CordonBadge host={drainable} /> : null}
        <div class="grow" />
        <EngineTag engine={host.engine} />
        <span class="muted mono" style={{ fontSize: "12px" }}>
          {host.address}
        </span>
        {drainable ? (
          <DrainButton
            host={drainable}
            busy={drain.busy.has(host.name)}
            readOnlyWhy={readOnlyWhy}
            onDrain={(h) => void drain.drain(h)}
            onUndrain={(h) => void drain.undrain(h)}
          />
        ) : null}
        {drainable ? <UncordonButton host={drainable} busy={drain.busy.has(host.name)} readOnlyWhy={readOnlyWhy} onUncordon={(h) => void drain.uncordon(h)} /> : null}
      </div>
      <div class="card-body">
        <div class="row" style={{ marginBottom: "10px", fontSize: "13px" }}>
          <span class="muted">Heartbeat</span>
          <b class={`num ${heartbeatClass(age, host.status)}`} data-testid="heartbeat-age">
            {age < 1 ? "just now" : `${duration(age)} ago`}
          </b>
          <span class="grow" />
          <span class="muted">
            {gpus.filter((d) => d.task).length} / {gpus.length} GPUs used · {host.tasks.length} tasks
          </span>
        </div>
        {gpus.length === 0 ? (
          <div class="muted" style={{ fontSize: "13px" }}>
            No GPUs on this host.
          </div>
        ) : (
          <div class="devices">
            {gpus.map((d) => (
              <div class={`device${d.task ? " busy" : ""}`} key={d.index} data-testid="device" data-index={d.index} data-task={d.task ? `${d.task.job_id}/${d.task.task}` : ""}>
                <div class="row">
                  <span class="dname">GPU {d.index}</span>
                  {d.simulated ? <span class="tag">simulated</span> : null}
                  <span class="grow" />
                  {d.memory_mb ? <span class="faint num">{Math.round(d.memory_mb / 1024)} GiB</span> : null}
                </div>
                <div class="muted" style={{ fontSize: "12px", overflow: "hidden", textOverflow: "ellipsis", whiteSpace: "nowrap" }} title={d.uuid ?? d.name}>
                  {d.name}
                </div>
                <div style={{ marginTop: "4px" }}>
                  {d.task ? (
                    <a href={href.job(d.task.job_id)}>
                      {d.task.task} · {d.task.job_name} #{d.task.job_id}
                    </a>
                  ) : (
                    <span class="faint">free</span>
                  )}
                </div>
                {d.task?.stats ? (
                  <div style={{ marginTop: "2px" }}>
                    <TaskUsage figures={taskFigures(d.task.stats)} />
                  </div>
                ) : null}
                <GpuUsage stats={d.stats} />
              </div>
            ))}
          </div>
        )}
        {cpuTasks.length ? (
          <div style={{ marginTop: "10px" }}>
            <div class="muted" style={{ fontSize: "12px", marginBottom: "4px" }}>
              Tasks without a GPU
            </div>
            <div class="chips">
              {cpuTasks.map((t) => (
                <a
                  key={`${t.job_id}/${t.task}`}
                  href={href.job(t.job_id)}
                  class={`chip s-${t.status}`}
                  style={{ textDecoration: "none", color: "inherit" }}
                  data-testid="host-task"
                >
                  <span class="name">{t.task}</span>
                  <span class="att">
                    {t.job_name} #{t.job_id}
                  </span>
                  {t.port ? <span class="att">:{t.port}</span> : null}
                  <TaskUsage figures={taskFigures(t.stats)} />
                </a>
              ))}
            </div>
          </div>
        ) : null}
      </div>
    </section>
  );
}
