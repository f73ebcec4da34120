// A cordoned host's badge (its reason; who cordoned it and its faults in the tooltip) and
// the button that clears the cordon. Off while the caller may only look or while it runs.
import type { Host } from "../api/types";
import { cordonDetail, cordonLabel } from "../data/hostCordon";

export function CordonBadge({ host }: { host: Host }) {
  const label = cordonLabel(host);
  if (label === null) return null;
  return (
    <span class="badge s-cordoned" data-testid="host-cordon" data-cause={host.cordon_cause ?? undefined} title={cordonDetail(host)}>
      {label}
    </span>
  );
}

export function UncordonButton({ host, busy, readOnlyWhy, onUncordon }: { host: Host; busy: boolean; readOnlyWhy: string | null; onUncordon: (host: Host) => void }) {
  if (cordonLabel(host) === null) return null;
  return (
    <button
      type="button"
      class="small"
      onClick={() => onUncordon(host)}
      disabled={readOnlyWhy !== null || busy}
      title={readOnlyWhy ?? "Clear the cordon: it takes tasks again (faults reported now are acknowledged)"}
      data-testid="host-uncordon"
    >
      {busy ? <span class="spinner" /> : null}
      Uncordon
    </button>
  );
}
