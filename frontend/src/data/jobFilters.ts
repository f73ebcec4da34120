// The jobs list's status filters, and what an empty list says under each.
import { ACTIVE_STATUSES, type JobStatus } from "../api/types";

export type Filter = "all" | "active" | "succeeded" | "failed" | "cancelled";
export const FILTERS: { id: Filter; label: string; statuses: JobStatus[] }[] = [
  { id: "all", label: "All", statuses: [] },
  { id: "active", label: "Active", statuses: [...ACTIVE_STATUSES] },
  { id: "succeeded", label: "Succeeded", statuses: ["succeeded"] },
  { id: "failed", label: "Failed", statuses: ["failed"] },
  { id: "cancelled", label: "Cancelled", statuses: ["cancelled"] },
];

/** The statuses a filter asks the server for (none: every status). */
export function filterStatuses(filter: Filter): JobStatus[] {
  return FILTERS.find((f) => f.id === filter)?.statuses ?? [];
}

/** A stored value as a filter: "all" for anything else (nothing stored, or an unknown value). */
export function asFilter(value: string | null): Filter {
  return FILTERS.some((f) => f.id === value) ? (value as Filter) : "all";
}

/** The title and hint of an empty list (without a search). */
export function emptyList(filter: Filter, project: string): { title: string; hint: string } {
  return {
    title: (filter === "all" ? "No jobs yet" : `No ${filter} jobs`) + (project ? ` in project ${project}` : ""),
    hint: filter === "all" ? "Submit one with the form, the CLI (strata submit) or POST /jobs." : "Choose another filter to see the rest.",
  };
}
