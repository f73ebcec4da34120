// A host's drain state beside its health, and the button that drains it or puts it back in
// service. Off while the caller may only look (`readOnlyWhy` says why) or while it runs.
import type { Host } from "../api/types";
import { drainLabel, drainState } from "../data/hostDrain";
import { dateTime } from "../ui/format";

export function DrainBadge({ host }: { host: Host }) {
  const label = drainLabel(host);
  if (label === null) return null;
  const state = drainState(host);
  return (
    <span class={`badge s-${state}`} data-testid="host-drain-state" data-state={state} title={`Out of service since ${dateTime(host.draining_since)}`}>
      {label}
    </span>
  );
}

export function DrainButton({
  host,
  busy,
  readOnlyWhy,
  onDrain,
  onUndrain,
}: {
  host: Host;
  busy: boolean;
  readOnlyWhy: string | null;
  onDrain: (host: Host) => void;
  onUndrain: (host: Host) => void;
}) {
  const inService = drainState(host) === "in-service";
  return (
    <button
      type="button"
      class={`small${inService ? " danger" : ""}`}
      onClick={() => (inService ? onDrain(host) : onUndrain(host))}
      disabled={readOnlyWhy !== null || busy}
      title={readOnlyWhy ?? (inService ? "Take it out of service: no new task goes there, and what runs there moves off" : "Put it back in service: it takes tasks again")}
      data-testid={inService ? "host-drain" : "host-undrain"}
    >
      {busy ? <span class="spinner" /> : null}
      {inService ? "Drain" : "Undrain"}
    </button>
  );
}
