// Metric series in the browser: columnar frames from the job stream merged into one series per
// (task, metric), ordered by step, across attempts, with a bounded number of points.
import type { Columns, MetricsFrame } from "../api/types";
import { lowerBound, minMaxIndices } from "./downsample";

export const DEFAULT_MAX_POINTS = 5_000;

/** One metric of one task: steps ascending, one point per step. */
export class Series {
  readonly steps: number[] = [];
  readonly values: (number | null)[] = [];
  readonly walls: number[] = [];
  readonly attempts: number[] = [];
  /** Bumped on every change, so that a chart redraws only what changed. */
  version = 0;
  /** Points received in all (before compaction). */
  received = 0;

  constructor(
    readonly task: string,
    readonly name: string,
    private readonly maxPoints = DEFAULT_MAX_POINTS,
  ) {}

  get length(): number {
    return this.steps.length;
  }

  /** Add one point. A step seen before keeps the value of the newest attempt: a restarted
   * task that resumes from a backup repeats steps, and its values are the ones that count. */
  add(step: number, value: number | null, wall: number, attempt: number): void {
    this.received += 1;
    const n = this.steps.length;
    if (n === 0 || step > (this.steps[n - 1] as number)) {
      this.push(step, value, wall, attempt);
    } else {
      const at = lowerBound(this.steps, step);
      if (this.steps[at] === step) {
        if (attempt >= (this.attempts[at] as number)) {
          this.values[at] = value;
          this.walls[at] = wall;
          this.attempts[at] = attempt;
        }
      } else {
        this.steps.splice(at, 0, step);
        this.values.splice(at, 0, value);
        this.walls.splice(at, 0, wall);
        this.attempts.splice(at, 0, attempt);
      }
    }
    this.version += 1;
  }

  private push(step: number, value: number | null, wall: number, attempt: number): void {
    this.steps.push(step);
    this.values.push(value);
    this.walls.push(wall);
    this.attempts.push(attempt);
    if (this.steps.length > this.maxPoints) this.compact();
  }

  /** Halve the series, keeping each bucket's min and max (and the first and last point):
   * memory stays bounded for a job that runs for days, and the shape (spikes included) stays. */
  compact(): void {
    const n = this.steps.length;
    if (n < 4) return;
    const first = this.steps[0] as number;
    const last = this.steps[n - 1] as number;
    const keep = minMaxIndices(this.steps, this.values, first, last, Math.floor(this.maxPoints / 4));
    const pick = <T>(column: T[]): T[] => keep.map((i) => column[i] as T);
    replace(this.steps, pick(this.steps));
    replace(this.values, pick(this.values));
    replace(this.walls, pick(this.walls));
    replace(this.attempts, pick(this.attempts));
  }

  latest(): number | null {
    for (let i = this.values.length - 1; i >= 0; i--) {
      const value = this.values[i];
      if (value !== null && value !== undefined) return value;
    }
    return null;
  }
}

function replace<T>(target: T[], source: T[]): void {
  target.length = 0;
  for (const item of source) target.push(item);
}

/** Every series of a job, keyed by task and metric name. */
export class SeriesStore {
  private readonly byKey = new Map<string, Series>();
  version = 0;

  constructor(private readonly maxPoints = DEFAULT_MAX_POINTS) {}

  /** Merge a `metrics` frame: `{task, attempt, series: {name: [[steps], [values], [walls]]}}`. */
  apply(frame: Pick<MetricsFrame, "task" | "attempt" | "series">): void {
    for (const [name, columns] of Object.entries(frame.series)) {
      this.merge(frame.task, name, frame.attempt, columns);
    }
    this.version += 1;
  }

  private merge(task: string, name: string, attempt: number, [steps, values, walls]: Columns): void {
    const series = this.get(task, name, true);
    for (let i = 0; i < steps.length; i++) {
      const value = values[i];
      series.add(steps[i] as number, value === undefined ? null : value, walls[i] ?? 0, attempt);
    }
  }

  get(task: string, name: string): Series | undefined;
  get(task: string, name: string, create: true): Series;
  get(task: string, name: string, create = false): Series | undefined {
    const key = `${task}\u0000${name}`;
    let series = this.byKey.get(key);
    if (!series && create) {
      series = new Series(task, name, this.maxPoints);
      this.byKey.set(key, series);
    }
    return series;
  }

  all(): Series[] {
    return [...this.byKey.values()];
  }

  /** Series whose name matches, from any task. */
  find(match: (name: string, task: string) => boolean): Series[] {
    return this.all().filter((s) => match(s.name, s.task));
  }
}
