// Which workers of a job are slow now, from its `health` events (finding "straggler", then
// "straggler_cleared" once back): the server keeps no other record, and the events carry the
// evidence the chip's tooltip shows. A finding holds for the attempt it was made on: a moved or
// restarted worker starts unflagged.
import type { StreamEvent, Task } from "../api/types";

interface Finding {
  attempt: number;
  text: string;
}

function describe(event: StreamEvent): string {
  const data = event.data as { rates?: Record<string, number>; cpu_percent?: Record<string, number> };
  const lines = [event.message];
  const rates = Object.entries(data.rates ?? {});
  if (rates.length) lines.push(`closures/s: ${rates.map(([w, r]) => `${w} ${r}`).join(", ")}`);
  const cpu = Object.entries(data.cpu_percent ?? {});
  if (cpu.length) lines.push(`CPU: ${cpu.map(([w, p]) => `${w} ${Math.round(p)}%`).join(", ")}`);
  return lines.join("\n");
}

/** Worker name -> the evidence, for the workers slow on their current attempt. */
export function slowWorkers(events: readonly StreamEvent[], tasks: readonly Task[]): Map<string, string> {
  const found = new Map<string, Finding>();
  for (const event of events) {
    if (event.kind !== "health" || !event.task) continue;
    const finding = event.data.finding;
    if (finding === "straggler") {
      found.set(event.task, { attempt: Number(event.data.attempt), text: describe(event) });
    } else if (finding === "straggler_cleared") {
      found.delete(event.task);
    }
  }
  const slow = new Map<string, string>();
  for (const task of tasks) {
    const finding = found.get(task.name);
    if (finding && finding.attempt === task.attempt && task.status === "running") slow.set(task.name, finding.text);
  }
  return slow;
}
