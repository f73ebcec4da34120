// Comparing jobs: their specs' differences, and one series per job for each metric, aligned by
// step or by the time since each job's first point.
import type { JobSpec, MetricsRead } from "../api/types";
import { Series } from "./series";

/** A spec flattened to `path → shown value` for the parts worth comparing. */
export function specFields(spec: JobSpec): Map<string, string> {
  const fields = new Map<string, string>();
  const put = (path: string, value: unknown) => {
    if (value === undefined) return;
    fields.set(path, typeof value === "string" ? value : JSON.stringify(value));
  };
  put("strategy", spec.strategy);
  put("entrypoint", (spec.entrypoint ?? []).join(" "));
  put("coordinator", spec.coordinator);
  put("working_dir", spec.working_dir);
  for (const [key, value] of Object.entries(spec.env ?? {})) put(`env.${key}`, value);
  for (const [role, replica] of Object.entries(spec.replicas ?? {})) {
    if (!replica) continue;
    for (const [key, value] of Object.entries(replica)) put(`replicas.${role}.${key}`, value);
  }
  for (const [key, value] of Object.entries(spec.checkpoint ?? {})) put(`checkpoint.${key}`, value);
  for (const [key, value] of Object.entries(spec.restart ?? {})) put(`restart.${key}`, value);
  put("tags", (spec.tags ?? []).join(", "));
  return fields;
}

export interface SpecDifference {
  path: string;
  /** One per job, in the jobs' order; "–" where a job's spec does not set it. */
  values: string[];
}

/** The fields whose values are not the same in every spec, in a stable order. */
export function specDifferences(specs: JobSpec[]): { differences: SpecDifference[]; same: number } {
  const flat = specs.map(specFields);
  const paths = new Set<string>();
  for (const fields of flat) for (const path of fields.keys()) paths.add(path);
  const differences: SpecDifference[] = [];
  let same = 0;
  for (const path of [...paths].sort(byPath)) {
    const values = flat.map((fields) => fields.get(path) ?? "–");
    if (values.every((v) => v === values[0])) same += 1;
    else differences.push({ path, values });
  }
  return { differences, same };
}

const ORDER = ["strategy", "coordinator", "entrypoint", "working_dir", "env.", "replicas.", "checkpoint.", "restart.", "tags"];
function byPath(a: string, b: string): number {
  const rank = (p: string) => ORDER.findIndex((prefix) => p === prefix || (prefix.endsWith(".") && p.startsWith(prefix)));
  return rank(a) - rank(b) || a.localeCompare(b);
}

export type Alignment = "step" | "time";

export interface ComparedJob {
  id: number;
  name: string;
  metrics: MetricsRead;
}

/** The task whose curves stand for the job: the chief, else the first worker, else any. */
export function reportingTask(metrics: MetricsRead): string | null {
  const tasks = [...new Set(metrics.series.map((s) => s.task))].sort();
  return tasks.find((t) => t.startsWith("chief:")) ?? tasks.find((t) => t.startsWith("worker:")) ?? tasks[0] ?? null;
}

/** For each metric any job reports: one series per job that reports it, x by `alignment`
 * (the step, or seconds since that job's first point). The loss first (see metricRank). */
export function comparedSeries(jobs: ComparedJob[], alignment: Alignment): Map<string, Series[]> {
  const byMetric = new Map<string, Series[]>();
  for (const job of jobs) {
    const task = reportingTask(job.metrics);
    const own = job.metrics.series.filter((s) => s.task === task);
    const start = Math.min(...own.flatMap((s) => s.wall_times.slice(0, 1)));
    for (const read of own) {
      const series = new Series(`#${job.id} ${job.name}`, read.name);
      for (let i = 0; i < read.steps.length; i++) {
        const x = alignment === "step" ? (read.steps[i] as number) : Math.round(((read.wall_times[i] as number) - start) * 1000) / 1000;
        series.add(x, read.values[i] ?? null, read.wall_times[i] as number, 0);
      }
      const list = byMetric.get(read.name) ?? [];
      list.push(series);
      byMetric.set(read.name, list);
    }
  }
  byMetric.delete("epoch"); // the same line for every job: nothing to compare
  return new Map([...byMetric.entries()].sort(([a], [b]) => metricRank(a) - metricRank(b) || a.localeCompare(b)));
}

const RATES = new Set(["lr", "steps_per_sec", "examples_per_sec"]);
/** The loss first, then the epoch metrics, evaluation, batch curves, rates, the rest. */
function metricRank(name: string): number {
  if (name === "loss") return 0;
  if (name === "val_loss") return 1;
  if (RATES.has(name)) return 5;
  if (!name.includes("/")) return 2;
  if (name.startsWith("eval/")) return 3;
  if (name.startsWith("batch/")) return 4;
  return 6;
}
