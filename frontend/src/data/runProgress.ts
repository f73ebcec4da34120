// A running job's progress as its runtime last reported it (JobRead.progress), in the words the
// jobs list and the job page show: percent, steps, epoch, rate, ETA and what keeps it busy.
import type { JobProgress } from "../api/types";
import { duration } from "../ui/format";

// Below this many steps a second a rate reads better as seconds per step ("20s/step").
const SLOW_RATE = 0.1;

export interface ProgressView {
  /** Whole percent done, 0..100; null while the total is unknown. */
  percent: number | null;
  /** "1520 / 4000", or "step 1520" while the total is unknown. */
  steps: string;
  /** "epoch 2 / 5", "epoch 2"; null when the runtime does not say. */
  epoch: string | null;
  /** "12.3 steps/s", "20s/step"; null until two steps are seen. */
  rate: string | null;
  /** "ETA 3m 22s"; null without a total or a rate. */
  eta: string | null;
  /** tracing, evaluating, checkpointing or exporting: why the step may stand still now. */
  busy: string | null;
}

/** Rounded down, so 100 only once the last step is done; capped, as a resumed run under
 * another total may have passed it. */
export function percentDone(step: number, total: number): number {
  if (total <= 0) return 0;
  return Math.max(0, Math.min(100, Math.floor((step * 100) / total)));
}

export function stepRate(stepsPerSecond: number): string {
  if (stepsPerSecond <= 0) return "stalled";
  if (stepsPerSecond < SLOW_RATE) return `${duration(1 / stepsPerSecond)}/step`;
  const digits = stepsPerSecond >= 100 ? 0 : stepsPerSecond >= 10 ? 1 : 2;
  return `${stepsPerSecond.toFixed(digits)} steps/s`;
}

export function eta(seconds: number): string {
  // format.duration says "now" below a second: an estimate is still a time.
  return `ETA ${seconds < 1 ? "0s" : duration(seconds)}`;
}

export function progressView(progress: JobProgress): ProgressView {
  const total = progress.total_steps ?? null;
  const rate = progress.steps_per_second ?? null;
  const left = progress.eta_seconds ?? null;
  const epoch = progress.epoch ?? null;
  return {
    percent: total === null ? null : percentDone(progress.step, total),
    steps: total === null ? `step ${progress.step}` : `${progress.step} / ${total}`,
    epoch: epoch === null ? null : `epoch ${epoch}${progress.epochs ? ` / ${progress.epochs}` : ""}`,
    rate: rate === null ? null : stepRate(rate),
    eta: left === null || total === null ? null : eta(left),
    busy: progress.busy ?? null,
  };
}

/** Everything in one line, for a title: "step 1520 / 4000 · 38% · epoch 2 / 5 · …". */
export function progressLine(view: ProgressView): string {
  const steps = view.percent === null ? view.steps : `step ${view.steps} · ${view.percent}%`;
  return [steps, view.epoch, view.rate, view.eta, view.busy].filter((part) => part !== null).join(" · ");
}

/** The jobs list's line under its bar, kept narrow: "1520/4000 · ETA 3m 22s"; while the total
 * is unknown "step 1520 · 12.3 steps/s"; the busy phase after either. */
export function cellLine(progress: JobProgress, view: ProgressView): string {
  const parts = view.percent === null ? [view.steps, view.rate] : [`${progress.step}/${progress.total_steps}`, view.eta];
  return [...parts, view.busy].filter((part) => part !== null).join(" · ");
}
