// The job page's chart catalogue: which metrics each chart draws, in what order, how a chart
// labels its series and what it says while empty.
import { epochChartNote } from "./chartNotes";
import type { Series } from "./series";

export interface ChartSpec {
  id: string;
  title: string;
  match: (name: string) => boolean;
  empty: string;
  points?: boolean;
  hideEmpty?: boolean;
  label?: (s: Series) => string;
}

const HIDDEN = new Set(["epoch", "lr", "examples_per_sec"]);
export const CHARTS: ChartSpec[] = [
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
// Metrics no chart above draws (and that are not deliberately hidden) still get a chart.
const CLAIMED = (name: string) =>
  HIDDEN.has(name) || name.startsWith("coordinator/") || /^worker:\d+\//.test(name) || CHARTS.some((c) => c.match(name));
export const OTHER: ChartSpec = { id: "other", title: "Other metrics", match: (n) => !CLAIMED(n), empty: "", hideEmpty: true };

export interface ChartChoice {
  spec: ChartSpec;
  list: Series[];
}

/** Series by name, then task: the order the charts' legends list them in. */
export function sortSeries(series: Series[]): Series[] {
  return series.sort((a, b) => a.name.localeCompare(b.name) || a.task.localeCompare(b.task));
}

/** Each chart with the series it draws; a chart that hides while empty only when it has some. */
export function chooseCharts(series: Series[]): ChartChoice[] {
  return [...CHARTS, OTHER]
    .map((spec) => ({ spec, list: series.filter((s) => spec.match(s.name)) }))
    .filter(({ spec, list }) => !spec.hideEmpty || list.length > 0);
}

/** A series' legend label: with its task only when several tasks share the chart. */
export function seriesLabel({ spec, list }: ChartChoice): (s: Series) => string {
  if (spec.label) return spec.label;
  const tasks = new Set(list.map((s) => s.task));
  return (s: Series) => (tasks.size > 1 ? `${s.name} · ${s.task}` : s.name);
}

/** What an empty chart says, given every series name the job has so far. */
export function emptyNote(spec: ChartSpec, names: string[], historyDone: boolean, finished: boolean): string {
  if (!historyDone) return "Loading metrics…";
  return spec.id === "loss" || spec.id === "metrics" ? epochChartNote(spec.id, names, finished) : spec.empty;
}
