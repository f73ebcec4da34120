// The jobs list between refetches: a status event from the cluster stream changes its job's row
// at once (the refetch it triggers then confirms it).
import type { JobPage, JobStatus, StreamEvent } from "../api/types";

/** The list with `event` applied to job `jobId`; the same list when it is no status change. */
export function withStatusEvent(page: JobPage | null, jobId: number, event: Pick<StreamEvent, "kind" | "to_status" | "message">): JobPage | null {
  if (!page || event.kind !== "status" || !event.to_status) return page;
  const to = event.to_status as JobStatus;
  return { ...page, items: page.items.map((j) => (j.id === jobId ? { ...j, status: to, reason: event.message } : j)) };
}
