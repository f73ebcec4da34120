// Jobs: the list (live from the cluster stream, refetched when events say it changed), a
// status filter, a search (name and description; `tag:x` for a tag), the jobs selected to
// compare, and the submit form.
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ApiError, api, websocketUrl } from "../api/client";
import { signalUnauthorized } from "../api/auth";
import { ACTIVE_STATUSES, type Job, type JobPage, type JobStatus } from "../api/types";
import { Empty, ErrorState, Loading, StatusBadge } from "../components/common";
import { SubmitForm } from "../components/SubmitForm";
import { debounce } from "../data/schedule";
import { parseSearch } from "../data/search";
import { StreamClient } from "../stream/client";
import { setConnection } from "../ui/connection";
import { ago } from "../ui/format";
import { useNow, useSubscription } from "../ui/hooks";
import { currentProject, onProjectChange } from "../ui/project";
import { href, navigate } from "../ui/router";

type Filter = "all" | "active" | "succeeded" | "failed" | "cancelled";
const FILTERS: { id: Filter; label: string; statuses: JobStatus[] }[] = [
  { id: "all", label: "All", statuses: [] },
  { id: "active", label: "Active", statuses: [...ACTIVE_STATUSES] },
  { id: "succeeded", label: "Succeeded", statuses: ["succeeded"] },
  { id: "failed", label: "Failed", statuses: ["failed"] },
  { id: "cancelled", label: "Cancelled", statuses: ["cancelled"] },
];
const FILTER_KEY = "strata.jobs-filter";
const FORM_KEY = "strata.jobs-form";

function savedFormChoice(): boolean | null {
  try {
    const value = sessionStorage.getItem(FORM_KEY);
    return value === null ? null : value === "true";
  } catch {
    return null;
  }
}
const PAGE_SIZE = 100;


function savedFilter(): Filter {
  try {
    const value = sessionStorage.getItem(FILTER_KEY);
    return FILTERS.some((f) => f.id === value) ? (value as Filter) : "all";
  } catch {
    return "all";
  }
}

export function JobsPage() {
  const [filter, setFilter] = useState<Filter>(savedFilter);
  const [page, setPage] = useState<JobPage | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  // The form opens by itself while there are no jobs; after that it is the user's choice.
  const [formChoice, setFormChoice] = useState<boolean | null>(savedFormChoice);
  const showForm = formChoice ?? (page !== null && page.total === 0 && filter === "all");
  const toggleForm = () => {
    setFormChoice(!showForm);
    try {
      sessionStorage.setItem(FORM_KEY, String(!showForm));
    } catch {
      /* storage off */
    }
  };
  const now = useNow(1000);
  const request = useRef(0);
  const statuses = FILTERS.find((f) => f.id === filter)?.statuses ?? [];
  const [searchText, setSearchText] = useState("");
  const [search, setSearch] = useState("");
  const [picked, setPicked] = useState<number[]>([]);
  const typed = useRef("");
  const applySearch = useMemo(() => debounce(() => setSearch(typed.current), 300), []);
  useEffect(() => () => applySearch.cancel(), [applySearch]);
  const togglePick = (id: number) => setPicked((ids) => (ids.includes(id) ? ids.filter((i) => i !== id) : [...ids, id]));
  const searchFor = (text: string) => {
    applySearch.cancel();
    typed.current = text;
    setSearchText(text);
    setSearch(text);
  };

  useSubscription(onProjectChange);
  const project = currentProject();
  const load = useCallback(async () => {
    const mine = ++request.current;
    try {
      const { tag, q } = parseSearch(search);
      const query = { status: statuses, limit: PAGE_SIZE, tag, q, project: project || undefined };
      const answer = await api.get("/jobs", { query });
      if (mine !== request.current) return;
      setPage(answer);
      setError(null);
    } catch (e) {
      if (mine !== request.current) return;
      setError(e instanceof ApiError ? e : new ApiError(0, null, String(e)));
    }
  }, [filter, search, project]);

  useEffect(() => {
    setPage(null);
    void load();
    try {
      sessionStorage.setItem(FILTER_KEY, filter);
    } catch {
      /* storage off */
    }
  }, [load]);

  // Live: the cluster stream's events change statuses at once, and trigger a refetch.
  useEffect(() => {
    const refetch = debounce(() => void load(), 400);
    const stream = new StreamClient({
      url: () => websocketUrl("/stream"),
      onFrame: (frame) => {
        if (frame.type !== "event" && frame.type !== "checkpoint") return;
        const { event, job_id } = frame;
        if (event.kind === "status" && event.to_status) {
          const to = event.to_status as JobStatus;
          setPage((current) =>
            current
              ? { ...current, items: current.items.map((j) => (j.id === job_id ? { ...j, status: to, reason: event.message } : j)) }
              : current,
          );
        }
        refetch();
      },
      onState: (state) => {
        setConnection(state);
        if (state.kind === "live") refetch();
      },
      onFatal: (reason, auth) => auth && signalUnauthorized(`The server refused the token: ${reason}`),
    });
    stream.start();
    // A safety net for anything the events do not cover (ages tick locally).
    const timer = setInterval(() => void load(), 30_000);
    return () => {
      refetch.cancel();
      stream.stop();
      clearInterval(timer);
      setConnection(null);
    };
  }, [load]);

  const jobs = page?.items ?? [];
  return (
    <div data-testid="jobs-page">
      <div class="page-head">
        <h1>Jobs</h1>
        {page ? <span class="count" data-testid="jobs-total">{page.total}</span> : null}
        <div class="segmented" role="group" aria-label="Filter by status" data-testid="status-filter">
          {FILTERS.map((f) => (
            <button
              type="button"
              key={f.id}
              class={filter === f.id ? "on" : ""}
              onClick={() => setFilter(f.id)}
              data-testid={`filter-${f.id}`}
              aria-pressed={filter === f.id}
            >
              {f.label}
            </button>
          ))}
        </div>
        <input
          type="search"
          class="jobs-search"
          placeholder="Search, or tag:name"
          value={searchText}
          onInput={(e) => {
            const text = (e.target as HTMLInputElement).value;
            setSearchText(text);
            typed.current = text;
            applySearch();
          }}
          aria-label="Search jobs by name and description, or tag:name"
          data-testid="jobs-search"
        />
        <div class="grow" />
        <button
          type="button"
          disabled={picked.length < 2}
          onClick={() => navigate(href.compare([...picked].sort((a, b) => a - b)))}
          title={picked.length < 2 ? "Tick two or more jobs to compare them" : "Their curves on the same charts, and how their specs differ"}
          data-testid="compare-selected"
        >
          Compare{picked.length ? ` (${picked.length})` : ""}
        </button>
        <button type="button" class={showForm ? "" : "primary"} onClick={toggleForm} data-testid="toggle-submit" aria-expanded={showForm}>
          {showForm ? "Hide form" : "+ New job"}
        </button>
      </div>
      <div class={`jobs-layout${showForm ? " with-form" : ""}`}>
        <section class="card">
          {error && !page ? (
            <ErrorState title="Jobs could not be loaded" detail={error.detail} retry={() => void load()} />
          ) : !page ? (
            <Loading what="jobs" />
          ) : jobs.length === 0 ? (
            search ? (
              <Empty title="No job matches the search">Search matches names and descriptions; tag:name matches a tag.</Empty>
            ) : (
              <Empty title={(filter === "all" ? "No jobs yet" : `No ${filter} jobs`) + (project ? ` in project ${project}` : "")}>
                {filter === "all" ? "Submit one with the form, the CLI (strata submit) or POST /jobs." : "Choose another filter to see the rest."}
              </Empty>
            )
          ) : (
            <div class="table-scroll">
              <table class="data" data-testid="jobs-table">
                <thead>
                  <tr>
                    <th class="pick" title="Tick jobs to compare them" />
                    <th>ID</th>
                    <th>Name</th>
                    <th>Project</th>
                    <th>Status</th>
                    <th>Strategy</th>
                    <th>Replicas</th>
                    <th title="Job restarts">Restarts</th>
                    <th>Age</th>
                  </tr>
                </thead>
                <tbody>
                  {jobs.map((job) => (
                    <JobRow
                      key={job.id}
                      job={job}
                      now={now}
                      picked={picked.includes(job.id)}
                      onPick={() => togglePick(job.id)}
                      onTag={(tag) => searchFor(`tag:${tag}`)}
                    />
                  ))}
                </tbody>
              </table>
            </div>
          )}
          {error && page ? <div class="notice" style={{ margin: "10px" }}>Refresh failed: {error.detail}</div> : null}
          {page && page.total > jobs.length ? (
            <div class="state compact faint">Showing the newest {jobs.length} of {page.total}.</div>
          ) : null}
        </section>
        {showForm ? <SubmitForm onSubmitted={(job) => navigate(href.job(job.id))} /> : null}
      </div>
    </div>
  );
}

const STRATEGY_LABEL: Record<string, string> = {
  parameter_server: "parameter server",
  multi_worker_mirrored: "multi-worker",
  mirrored: "mirrored",
};
const ROLE_LABEL: Record<string, string> = { evaluator: "eval" };

function replicaSummary(job: Job): [string, number][] {
  const counts = new Map<string, number>();
  for (const task of job.tasks) counts.set(task.role, (counts.get(task.role) ?? 0) + 1);
  return ["chief", "worker", "ps", "evaluator"].filter((r) => counts.has(r)).map((r) => [r, counts.get(r) ?? 0]);
}

function JobRow({
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
  // Tasks restarted alone (a parameter-server worker) beyond the job's own restarts.
  const taskRestarts = job.tasks.reduce((n, t) => n + Math.max(0, t.attempt - job.restart_count), 0);
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
      <td class="muted nowrap" title={job.strategy}>
        {STRATEGY_LABEL[job.strategy] ?? job.strategy}
      </td>
      <td>
        <span class="replicas">
          {replicaSummary(job).map(([role, n]) => (
            <span class="tag" key={role} title={`${n} ${role}`}>
              {n} {ROLE_LABEL[role] ?? role}
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
