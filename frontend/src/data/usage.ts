// A task's CPU and memory as the agents sample them (every 5 s): from its REST read
// (`stats`) or, fresher, the job stream's last usage frame for it.
import type { TaskStats, UsageFrame } from "../api/types";
import { bytes } from "../ui/format";

/** A task's figures, from its last REST read or, fresher, its last usage frame. */
export interface TaskFigures {
  cpuPercent: number | null;
  rssBytes: number | null;
}

export function taskFigures(stats: TaskStats | null | undefined, live?: UsageFrame): TaskFigures | null {
  if (live && (!stats || live.attempt >= stats.attempt)) {
    const cpu = live.values["task/cpu_percent"];
    const rss = live.values["task/rss_bytes"];
    return { cpuPercent: cpu ?? null, rssBytes: rss ?? null };
  }
  if (!stats) return null;
  return { cpuPercent: stats.cpu_percent, rssBytes: stats.rss_bytes };
}

export function taskUsageText(figures: TaskFigures | null): string | null {
  if (!figures || (figures.cpuPercent === null && figures.rssBytes === null)) return null;
  const cpu = figures.cpuPercent === null ? "CPU –" : `CPU ${Math.round(figures.cpuPercent)}%`;
  return `${cpu} · ${bytes(figures.rssBytes)}`;
}

