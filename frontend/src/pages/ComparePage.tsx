// Compare jobs: one chart per metric with a line per job (by step, or by the time since each
// job's first point), and the differences between their specs beside them.
import { useEffect, useMemo, useState } from "preact/hooks";
import { ApiError, api, tensorBoardUrl } from "../api/client";
import type { Job } from "../api/types";
import { Card, ErrorState, Loading, StatusBadge } from "../components/common";
import { MetricChart } from "../components/MetricChart";
import { comparedSeries, specDifferences, type Alignment, type ComparedJob } from "../data/compare";
import type { Series } from "../data/series";
import { href } from "../ui/router";

const MAX_POINTS = 2000; // per series: the server downsamples
const REFRESH_MS = 10_000; // while one of them runs

interface Loaded {
  jobs: Job[];
  compared: ComparedJob[];
}

export function ComparePage({ ids }: { ids: number[] }) {
  const [loaded, setLoaded] = useState<Loaded | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [alignment, setAlignment] = useState<Alignment>("step");

  useEffect(() => {
    let stop = false;
    const load = async () => {
      try {
        const jobs = await Promise.all(ids.map((id) => api.get("/jobs/{job_id}", { path: { job_id: id } })));
        const metrics = await Promise.all(
          ids.map((id) => api.get("/jobs/{job_id}/metrics", { path: { job_id: id }, query: { max_points: MAX_POINTS } })),
        );
        if (stop) return;
        setLoaded({ jobs, compared: jobs.map((job, i) => ({ id: job.id, name: job.name, metrics: metrics[i]! })) });
        setError(null);
      } catch (e) {
        if (!stop) setError(e instanceof ApiError ? e : new ApiError(0, null, String(e)));
      }
    };
    void load();
    const timer = setInterval(() => void load(), REFRESH_MS);
    return () => {
      stop = true;
      clearInterval(timer);
    };
  }, [ids.join(",")]);

  const charts = useMemo(() => (loaded ? comparedSeries(loaded.compared, alignment) : new Map<string, Series[]>()), [loaded, alignment]);
  const diff = useMemo(() => (loaded ? specDifferences(loaded.jobs.map((j) => j.spec)) : null), [loaded]);

  if (ids.length < 2) {
    return (
      <div class="state">
        <span class="title">Choose at least two jobs to compare</span>
        <a href={href.jobs()}>Select them in the jobs list</a>
      </div>
    );
  }
  if (!loaded) {
    return error ? <ErrorState title="The jobs could not be loaded" detail={error.detail} /> : <Loading what="the jobs" />;
  }
  const { jobs } = loaded;
  const label = (s: Series) => s.task;
  return (
    <div data-testid="compare-page" data-jobs={ids.join(",")}>
      <div class="page-head">
        <a href={href.jobs()} class="muted">
          Jobs
        </a>
        <span class="faint">/</span>
        <h1>Compare {jobs.length} jobs</h1>
        <div class="grow" />
        <div class="segmented" role="group" aria-label="Align the runs" data-testid="align">
          {(["step", "time"] as const).map((a) => (
            <button type="button" key={a} class={alignment === a ? "on" : ""} aria-pressed={alignment === a} onClick={() => setAlignment(a)} data-testid={`align-${a}`}>
              {a === "step" ? "By step" : "By time since start (s)"}
            </button>
          ))}
        </div>
        <a
          class="button"
          href={tensorBoardUrl("/tensorboard/compare", { jobs: ids.join(",") })}
          target="_blank"
          rel="noopener"
          title="These jobs in one TensorBoard, a run per job and task"
          data-testid="compare-tensorboard"
        >
          TensorBoard
        </a>
      </div>
      {error ? <div class="notice">Refresh failed: {error.detail}</div> : null}
      <div class="compare-layout">
        <div class="charts" data-testid="compare-charts">
          {charts.size === 0 ? (
            <Card title="Metrics">
              <div class="state compact">None of these jobs has reported a metric yet.</div>
            </Card>
          ) : (
            [...charts.entries()].map(([name, list]) => (
              <MetricChart
                key={`${name}-${alignment}`}
                id={`compare-${name.replace(/[^A-Za-z0-9_-]/g, "-")}`}
                title={`${name}${alignment === "time" ? " · by seconds since start" : ""}`}
                series={list}
                label={label}
                empty=""
                points={list.every((s) => s.length < 60)}
              />
            ))
          )}
        </div>
        <div class="compare-side">
          <Card title="Jobs" flush testid="compare-jobs">
            <table class="data">
              <tbody>
                {jobs.map((job) => (
                  <tr key={job.id}>
                    <td class="num muted">#{job.id}</td>
                    <td>
                      <a href={href.job(job.id)}>
                        <b>{job.name}</b>
                      </a>
                      {job.spec.description ? <div class="muted small-text">{job.spec.description}</div> : null}
                    </td>
                    <td>
                      <StatusBadge status={job.status} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </Card>
          <Card
            title="Spec differences"
            flush
            testid="spec-differences"
            right={diff ? <span class="faint">{diff.same} fields the same</span> : null}
          >
            {diff && diff.differences.length > 0 ? (
              <div class="table-scroll">
                <table class="data" data-testid="spec-diff-table">
                  <thead>
                    <tr>
                      <th>Field</th>
                      {jobs.map((job) => (
                        <th key={job.id}>#{job.id}</th>
                      ))}
                    </tr>
                  </thead>
                  <tbody>
                    {diff.differences.map((d) => (
                      <tr key={d.path} data-testid="spec-diff-row" data-path={d.path}>
                        <td class="mono">{d.path}</td>
                        {d.values.map((value, i) => (
                          <td key={i} class="mono diff-value">
                            {value}
                          </td>
                        ))}
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            ) : (
              <div class="state compact">Their specs are the same (entrypoint, env, replicas, checkpoint and restart policies).</div>
            )}
          </Card>
        </div>
      </div>
    </div>
  );
}
