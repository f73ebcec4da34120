// What agents last sampled: a task's CPU and resident memory, a GPU's utilisation and memory
// (GET /cluster, a job's tasks, and the job stream's usage frames). Absent: nothing is shown.
import type { DeviceStats } from "../api/types";
import { type TaskFigures, taskUsageText } from "../data/usage";
import { bytes } from "../ui/format";

export { taskFigures, taskUsageText } from "../data/usage";

export function TaskUsage({ figures }: { figures: TaskFigures | null }) {
  const text = taskUsageText(figures);
  if (!text) return null;
  return (
    <span class="att num" data-testid="task-usage" title="CPU (of one core) and resident memory, sampled by its agent every 5 s">
      {text}
    </span>
  );
}

export function GpuUsage({ stats }: { stats: DeviceStats | null | undefined }) {
  if (!stats) return null;
  const util = stats.utilization_percent;
  const used = stats.memory_used_bytes;
  const total = stats.memory_total_bytes;
  return (
    <div class="gpu-usage" data-testid="gpu-usage" title={`Sampled through NVML at ${stats.sampled_at}`}>
      <div class="bar" aria-hidden="true">
        <i style={{ width: `${Math.min(100, Math.max(0, util ?? 0))}%` }} />
      </div>
      <span class="faint num">
        {util === null ? "util –" : `${Math.round(util)}%`} · {bytes(used)}
        {total ? ` / ${bytes(total)}` : ""}
      </span>
    </div>
  );
}
