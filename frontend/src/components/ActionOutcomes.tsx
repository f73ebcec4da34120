// What a page's actions (the job's controls, a host's drain) did: pending ones with their age,
// finished ones dismissable.
import { shownOutcomes, type Outcome } from "../data/outcomes";

export function ActionOutcomes({ outcomes, now, dismiss }: { outcomes: Outcome[]; now: number; dismiss: (id: number) => void }) {
  const shown = shownOutcomes(outcomes, now);
  if (!shown.length) return null;
  return (
    <div class="outcomes" aria-live="polite">
      {shown.map((o) => (
        <div class={`outcome ${o.state}`} key={o.id} data-testid="action-outcome" data-action={o.action} data-state={o.state}>
          {o.state === "pending" ? <span class="spinner" /> : <b>{o.state === "ok" ? "✓" : "✕"}</b>}
          <span>{o.text}</span>
          {o.state === "pending" ? <span class="faint num">{Math.floor((now - o.started) / 1000)} s</span> : null}
          {o.state !== "pending" ? (
            <button type="button" class="small ghost dismiss" onClick={() => dismiss(o.id)} aria-label="Dismiss">
              ✕
            </button>
          ) : null}
        </div>
      ))}
    </div>
  );
}
