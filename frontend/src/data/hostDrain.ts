// A host's drain state in the words `strata hosts` uses (backend/cli/hosts.py), and what the
// cluster page's drain and undrain controls ask, say while they run and report.
import { type Access, READ_ONLY } from "../api/access";
import type { Host } from "../api/types";
import type { ConfirmRequest } from "../components/ConfirmDialog";

export type DrainState = "in-service" | "draining" | "drained";
type DrainFields = Pick<Host, "draining_since" | "live_tasks">;

/** Drained hosts take no new task; they are drained once no task of theirs is left. */
export function drainState(host: DrainFields): DrainState {
  if (host.draining_since === null || host.draining_since === undefined) return "in-service";
  return host.live_tasks > 0 ? "draining" : "drained";
}

/** "draining (3 tasks left)", "drained", or null for a host in service. */
export function drainLabel(host: DrainFields): string | null {
  const state = drainState(host);
  if (state === "in-service") return null;
  if (state === "drained") return "drained";
  return `draining (${host.live_tasks} task${host.live_tasks === 1 ? "" : "s"} left)`;
}

/** The CLI's status column: "online", "online, draining (3 tasks left)", "online, drained". */
export function hostStatusText(host: DrainFields & Pick<Host, "status">): string {
  const label = drainLabel(host);
  return label === null ? host.status : `${host.status}, ${label}`;
}

export const HOSTS_ADMIN_ONLY = "Only an admin token may drain or undrain hosts";

/** Why the caller may not drain hosts (the server admits admin tokens only), or null when they
 * may or it is not known yet (the server still refuses then). */
export function hostControlsReadOnly(access: Access): string | null {
  if (access === "viewer") return READ_ONLY;
  return access === "user" ? HOSTS_ADMIN_ONLY : null;
}

/** The drain's `deadline_seconds`; "" sends none (the server's default). The server caps each
 * job's wait at STRATA_INTERRUPTION_DEADLINE_SECONDS (a minute unless set), so none is longer. */
export const DRAIN_DEADLINES: { value: string; label: string }[] = [
  { value: "", label: "Server default" },
  { value: "10", label: "10 s" },
  { value: "30", label: "30 s" },
  { value: "60", label: "1 min" },
];

export function deadlineSeconds(value: string): number | undefined {
  const seconds = Number(value);
  return value !== "" && Number.isFinite(seconds) && seconds > 0 ? seconds : undefined;
}

export function drainConfirm(host: Pick<Host, "name" | "live_tasks">): ConfirmRequest {
  const tasks = host.live_tasks;
  return {
    title: `Drain ${host.name}?`,
    body:
      tasks > 0
        ? `${host.name} takes no new task, and the jobs of its ${tasks} task${tasks === 1 ? "" : "s"} are checkpointed, then placed elsewhere (no restart counted).`
        : `${host.name} takes no new task until it is undrained. Nothing runs there now.`,
    confirmLabel: "Drain",
    danger: true,
    choice: { label: "Checkpoint deadline", options: DRAIN_DEADLINES, initial: "" },
  };
}

export const drainPending = (name: string): string => `Draining ${name}…`;
export const undrainPending = (name: string): string => `Putting ${name} back in service…`;

export function drainDone(host: Pick<Host, "name" | "status" | "draining_since" | "live_tasks">): string {
  return `Draining ${host.name}: ${hostStatusText(host)}.`;
}

export function undrainDone(host: Pick<Host, "name" | "status" | "draining_since" | "live_tasks">): string {
  return `${host.name} is in service: ${hostStatusText(host)}.`;
}
