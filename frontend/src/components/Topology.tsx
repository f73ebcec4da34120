// The job's tasks by host and role, coloured by state, with attempts and per-task restart.
import type { Task, UsageFrame } from "../api/types";
import { StatusBadge } from "./common";
import { TaskUsage, taskFigures, taskUsageText } from "./Usage";

const ROLES = ["chief", "worker", "ps", "evaluator"] as const;

export interface TopologyProps {
  tasks: Task[];
  hostStatus?: Map<string, string>;
  selected: string | null;
  onSelect: (task: string) => void;
  onRestart: ((task: Task) => void) | null;
  busy: Set<string>;
  /** The job stream's last usage frame per task, fresher than the tasks' own stats. */
  usage?: Map<string, UsageFrame>;
  /** Workers found slow (data/stragglers), with the evidence. */
  slow?: Map<string, string>;
}

export function Topology({ tasks, hostStatus, selected, onSelect, onRestart, busy, usage, slow }: TopologyProps) {
  const byHost = new Map<string, Task[]>();
  for (const task of tasks) {
    const host = task.host ?? "";
    const list = byHost.get(host) ?? [];
    list.push(task);
    byHost.set(host, list);
  }
  const hosts = [...byHost.keys()].sort((a, b) => (a === "" ? 1 : b === "" ? -1 : a.localeCompare(b)));
  return (
    <div class="hosts" data-testid="topology">
      {hosts.map((host) => {
        const mine = byHost.get(host) ?? [];
        const status = host ? hostStatus?.get(host) : undefined;
        return (
          <div class="host-box" key={host || "unplaced"} data-testid="topology-host" data-host={host || "unplaced"}>
            <div class="host-name">
              <span>{host || "Not placed"}</span>
              {status ? <StatusBadge status={status} testid="host-status" /> : null}
              <span class="grow" />
              <span class="faint" style={{ fontWeight: 400, fontSize: "12px" }}>
                {mine.length} task{mine.length === 1 ? "" : "s"}
              </span>
            </div>
            {ROLES.map((role) => {
              const ofRole = mine.filter((t) => t.role === role).sort((a, b) => a.index - b.index);
              if (ofRole.length === 0) return null;
              return (
                <div class="role-row" key={role}>
                  <span class="role">{role}</span>
                  <div class="chips">
                    {ofRole.map((task) => (
                      <TaskChip
                        key={task.name}
                        task={task}
                        selected={selected === task.name}
                        onSelect={onSelect}
                        onRestart={onRestart}
                        busy={busy.has(task.name)}
                        live={usage?.get(task.name)}
                        slow={slow?.get(task.name)}
                      />
                    ))}
                  </div>
                </div>
              );
            })}
          </div>
        );
      })}
    </div>
  );
}

function TaskChip({
  task,
  selected,
  onSelect,
  onRestart,
  busy,
  live,
  slow,
}: {
  task: Task;
  selected: boolean;
  onSelect: (task: string) => void;
  onRestart: ((task: Task) => void) | null;
  busy: boolean;
  live?: UsageFrame;
  slow?: string;
}) {
  const running = task.status === "running";
  const figures = running ? taskFigures(task.stats, live?.attempt === task.attempt ? live : undefined) : null;
  const usageText = taskUsageText(figures);
  const where = [task.port ? `port ${task.port}` : null, task.gpus.length ? `GPU ${task.gpus.join(",")}` : null, task.pid ? `pid ${task.pid}` : null]
    .filter(Boolean)
    .join(" · ");
  const exit = task.exit_code !== null ? ` · exit ${task.exit_code}` : "";
  return (
    <span
      class={`chip s-${task.status}${selected ? " selected" : ""}`}
      data-testid={`task-${task.name}`}
      data-status={task.status}
      data-attempt={task.attempt}
      data-failures={task.failure_count}
      title={`${task.name}: ${task.status}${exit}${where ? ` · ${where}` : ""} · attempt ${task.attempt} (${task.failure_count} after failures)${usageText ? ` · ${usageText}` : ""}. Click for its log.`}
      onClick={() => onSelect(task.name)}
      role="button"
      tabIndex={0}
      onKeyDown={(e) => (e.key === "Enter" || e.key === " ") && onSelect(task.name)}
    >
      <span class="name">{task.name}</span>
      <span class="st">{task.status}</span>
      {task.attempt > 0 ? (
        <span class="att" title={`restarted ${task.attempt} time${task.attempt === 1 ? "" : "s"}, ${task.failure_count} after failures`}>
          ↻{task.attempt}
        </span>
      ) : null}
      {task.gpus.length ? <span class="att">GPU {task.gpus.join(",")}</span> : null}
      <TaskUsage figures={figures} />
      {slow ? (
        <span class="att" data-testid={`slow-${task.name}`} title={slow} style={{ color: "var(--warn)", fontWeight: 600 }}>
          slow
        </span>
      ) : null}
      {onRestart ? (
        <button
          type="button"
          title={`Restart ${task.name}`}
          aria-label={`Restart ${task.name}`}
          data-testid={`restart-task-${task.name}`}
          disabled={busy}
          onClick={(e) => {
            e.stopPropagation();
            onRestart(task);
          }}
        >
          {busy ? <span class="spinner" style={{ width: "10px", height: "10px" }} /> : "⟳"}
        </button>
      ) : null}
    </span>
  );
}
