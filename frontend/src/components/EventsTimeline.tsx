// The job's events, newest first: status changes, task starts and exits, restarts, requests
// (with who asked, for what came through the API).
import type { StreamEvent } from "../api/types";
import { clock } from "../ui/format";
import { Empty } from "./common";

const KIND_COLOUR: Record<string, string> = {
  created: "s-pending",
  restart: "s-restarting",
  evaluator: "s-scheduled",
  checkpoint: "s-succeeded",
};

function colour(event: StreamEvent): string {
  if (event.kind === "status" && event.to_status) return `s-${event.to_status}`;
  if (event.kind === "task_status") {
    const to = (event.data as Record<string, unknown>).to;
    if (typeof to === "string") return `s-${to}`;
  }
  return KIND_COLOUR[event.kind] ?? "";
}

function label(event: StreamEvent): string {
  switch (event.kind) {
    case "status":
      return `${event.from_status ?? "–"} → ${event.to_status ?? "–"}`;
    case "task_status":
      return event.task ?? "task";
    default:
      return event.task ? `${event.kind} · ${event.task}` : event.kind;
  }
}

export function EventsTimeline({ events, loading }: { events: StreamEvent[]; loading: boolean }) {
  if (events.length === 0) {
    return loading ? (
      <Empty title="Loading events…" compact />
    ) : (
      <Empty title="No events yet" compact />
    );
  }
  const newest = events.slice(-300).reverse();
  return (
    <ul class="timeline" data-testid="events">
      {newest.map((event) => (
        <li
          key={event.id}
          class={colour(event)}
          data-testid="event"
          data-kind={event.kind}
          data-task={event.task ?? ""}
          data-actor={event.actor ?? ""}
        >
          <span class="dot" />
          <div>
            <div class="row" style={{ gap: "6px" }}>
              <span class="kind">{label(event)}</span>
              {event.actor ? (
                <span class="muted" data-testid="event-actor" title="Who asked for it">
                  by {event.actor}
                </span>
              ) : null}
              <span class="grow" />
              <span class="when num" title={event.at}>
                {clock(event.at)}
              </span>
            </div>
            <div class="msg">{event.message}</div>
          </div>
        </li>
      ))}
    </ul>
  );
}
