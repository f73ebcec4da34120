// Sweeps: a search's progress, its best trial, its trials in order, and the series its charts
// draw (the objective by trial, each parameter against the objective, the learning curves).
import type { components } from "../api/schema";
import { href } from "../ui/router";

type Schemas = components["schemas"];
export type Sweep = Schemas["SweepRead"];
export type SweepSummary = Schemas["SweepSummary"];
export type SweepStatus = Schemas["SweepStatus"];
export type Trial = Schemas["TrialRead"];
export type TrialStatus = Schemas["TrialStatus"];
export type Parameter = Sweep["spec"]["parameters"][string];

export const SWEEP_UNFINISHED: readonly SweepStatus[] = ["running", "stopping"];
export const sweepFinished = (status: SweepStatus): boolean => !SWEEP_UNFINISHED.includes(status);

/** Trials that ended (in any way), those running, and the budget. */
export function sweepProgress(sweep: Pick<SweepSummary, "counts" | "budget">): { ended: number; running: number; budget: number } {
  const c = sweep.counts;
  return { ended: c.succeeded + c.pruned + c.failed + c.stopped, running: c.running, budget: sweep.budget };
}

export function progressText(sweep: Pick<SweepSummary, "counts" | "budget">): string {
  const { ended, running, budget } = sweepProgress(sweep);
  return `${ended} / ${budget}${running ? ` · ${running} running` : ""}`;
}

/** The trials in their order (by number). */
export function sortTrials(trials: readonly Trial[]): Trial[] {
  return [...trials].sort((a, b) => a.number - b.number);
}

/** The succeeded trial with the best objective, the earliest of equals (the server's rule). */
export function bestTrial(trials: readonly Trial[], direction: SweepSummary["direction"]): Trial | null {
  const sign = direction === "minimize" ? 1 : -1;
  let best: Trial | null = null;
  for (const trial of sortTrials(trials)) {
    if (trial.status !== "succeeded" || trial.value === null) continue;
    if (best === null || sign * trial.value < sign * (best.value as number)) best = trial;
  }
  return best;
}

/** The objective a trial got to: its final value, else (pruned, failed, stopped) its last
 * intermediate one, else null. */
export function reachedValue(trial: Trial): number | null {
  if (trial.value !== null) return trial.value;
  const last = trial.curve[trial.curve.length - 1];
  return last ? last[1] : null;
}

/** The parameters' names: the spec's order, then any other a trial has. */
export function parameterNames(spec: Sweep["spec"], trials: readonly Trial[]): string[] {
  const names = Object.keys(spec.parameters);
  for (const trial of trials) for (const name of Object.keys(trial.params)) if (!names.includes(name)) names.push(name);
  return names;
}

export function isLogParameter(parameter: Parameter | undefined): boolean {
  return parameter !== undefined && parameter.type !== "categorical" && parameter.log === true;
}

export function paramText(value: unknown): string {
  if (value === undefined || value === null) return "–";
  if (typeof value === "number") {
    if (Number.isInteger(value)) return String(value);
    const abs = Math.abs(value);
    return abs !== 0 && (abs < 1e-3 || abs >= 1e6) ? value.toExponential(3) : String(Number(value.toPrecision(4)));
  }
  return String(value);
}

/** A trial's parameters as "lr=0.01, units=64". */
export function paramsLine(params: Record<string, unknown>): string {
  return Object.entries(params)
    .map(([name, value]) => `${name}=${paramText(value)}`)
    .join(", ");
}

// --- charts ------------------------------------------------------------------------------

/** The kinds of points the charts tell apart. */
export type PointKind = "succeeded" | "pruned" | "failed" | "running";
export const POINT_KINDS: readonly PointKind[] = ["succeeded", "pruned", "failed", "running"];

export function pointKind(status: TrialStatus): PointKind {
  return status === "stopped" ? "failed" : status;
}

/** Columnar data for a chart: shared x values, then one y column per series (null: no point). */
export interface ChartColumns {
  x: number[];
  series: { label: string; kind: PointKind | "best" | "trial"; values: (number | null)[] }[];
}

/** The objective over the trials: x the trial number, a series per kind of end that has
 * points, and the best so far (a step line over the succeeded trials). */
export function objectiveColumns(trials: readonly Trial[], direction: SweepSummary["direction"]): ChartColumns {
  const sorted = sortTrials(trials);
  const x = sorted.map((t) => t.number);
  const series: ChartColumns["series"] = [];
  for (const kind of POINT_KINDS) {
    const values = sorted.map((t) => (pointKind(t.status) === kind ? reachedValue(t) : null));
    if (values.some((v) => v !== null)) series.push({ label: kind, kind, values });
  }
  const sign = direction === "minimize" ? 1 : -1;
  let best: number | null = null;
  const bestSoFar = sorted.map((t) => {
    if (t.status === "succeeded" && t.value !== null && (best === null || sign * t.value < sign * best)) best = t.value;
    return best;
  });
  if (bestSoFar.some((v) => v !== null)) series.push({ label: "best so far", kind: "best", values: bestSoFar });
  return { x, series };
}

/** Where a parameter's value sits on its chart's x axis: the number, or a categorical
 * choice's index (`labels` names them). */
export function paramAxis(parameter: Parameter | undefined, trials: readonly Trial[], name: string): { position: (value: unknown) => number | null; labels: string[] | null; log: boolean } {
  if (parameter?.type === "categorical" || trials.some((t) => t.params[name] !== undefined && typeof t.params[name] !== "number")) {
    const choices = parameter?.type === "categorical" ? parameter.choices.map(String) : [];
    for (const t of trials) if (t.params[name] !== undefined && !choices.includes(String(t.params[name]))) choices.push(String(t.params[name]));
    return { position: (v) => (v === undefined ? null : choices.indexOf(String(v))), labels: choices, log: false };
  }
  const log = isLogParameter(parameter);
  return {
    position: (v) => (typeof v === "number" && Number.isFinite(v) && (!log || v > 0) ? v : null),
    labels: null,
    log,
  };
}

/** One parameter against the objective: a point per trial that reached a value, x sorted,
 * a series per kind of end. */
export function paramColumns(trials: readonly Trial[], name: string, parameter: Parameter | undefined): ChartColumns & { labels: string[] | null; log: boolean } {
  const axis = paramAxis(parameter, trials, name);
  const rows = trials
    .map((t) => ({ x: axis.position(t.params[name]), y: reachedValue(t), kind: pointKind(t.status), number: t.number }))
    .filter((r): r is { x: number; y: number; kind: PointKind; number: number } => r.x !== null && r.y !== null)
    .sort((a, b) => a.x - b.x || a.number - b.number);
  const series: ChartColumns["series"] = [];
  for (const kind of POINT_KINDS) {
    if (!rows.some((r) => r.kind === kind)) continue;
    series.push({ label: kind, kind, values: rows.map((r) => (r.kind === kind ? r.y : null)) });
  }
  return { x: rows.map((r) => r.x), series, labels: axis.labels, log: axis.log };
}

/** The learning curves: x every resource (epoch or step) any trial reported, a series per
 * trial that reported one, in trial order. */
export function curveColumns(trials: readonly Trial[]): ChartColumns & { trials: Trial[] } {
  const withCurves = sortTrials(trials).filter((t) => t.curve.length > 0);
  const x = [...new Set(withCurves.flatMap((t) => t.curve.map(([r]) => r)))].sort((a, b) => a - b);
  const series = withCurves.map((t) => {
    const at = new Map(t.curve.map(([r, v]) => [r, v]));
    return { label: `trial ${t.number}`, kind: "trial" as const, values: x.map((r) => at.get(r) ?? null) };
  });
  return { x, series, trials: withCurves };
}

/** The index of a series' last point (where a pruned curve's marker goes), or -1. */
export function lastPoint(values: readonly (number | null)[]): number {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return i;
  return -1;
}

// --- selection ---------------------------------------------------------------------------

/** The selected trials' jobs, in trial order, once each (what the compare page takes). */
export function selectedJobIds(trials: readonly Trial[], selected: readonly number[]): number[] {
  const ids = sortTrials(trials)
    .filter((t) => selected.includes(t.number))
    .map((t) => t.job_id);
  return [...new Set(ids)];
}

/** The compare page for the selected trials' jobs; null for fewer than two. */
export function compareHash(trials: readonly Trial[], selected: readonly number[]): string | null {
  const ids = selectedJobIds(trials, selected);
  return ids.length < 2 ? null : href.compare(ids);
}

export function toggled(selected: readonly number[], number: number): number[] {
  return selected.includes(number) ? selected.filter((n) => n !== number) : [...selected, number].sort((a, b) => a - b);
}

// --- the list ------------------------------------------------------------------------------

/** Newest first (the server's order). */
export function sortSweeps(sweeps: readonly SweepSummary[]): SweepSummary[] {
  return [...sweeps].sort((a, b) => b.id - a.id);
}

/** How often a page reads its sweeps again: often while one runs, rarely otherwise. */
export function refreshMs(statuses: readonly SweepStatus[]): number {
  return statuses.some((s) => !sweepFinished(s)) ? 2_000 : 30_000;
}

/** The stop confirmation's text. */
export function stopConfirm(sweep: Pick<SweepSummary, "id" | "name" | "counts">): { title: string; body: string; confirmLabel: string; danger: boolean } {
  const running = sweep.counts.running;
  return {
    title: `Stop sweep ${sweep.name}?`,
    body: `No more trials are started${running ? `, and its ${running} running trial${running === 1 ? " is" : "s are"} cancelled` : ""}. It ends stopped, with the best trial found so far.`,
    confirmLabel: "Stop sweep",
    danger: true,
  };
}
