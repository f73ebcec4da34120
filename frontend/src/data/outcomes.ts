// What the job page shows of the actions it ran: newest first, at most a few, one per action
// once finished; a success fades after a minute while errors stay until dismissed.
import { ApiError } from "../api/client";

export type OutcomeState = "pending" | "ok" | "error";
export interface Outcome {
  id: number;
  action: string;
  state: OutcomeState;
  text: string;
  started: number;
  /** When it reached its state: a success fades out after a minute, errors stay. */
  at: number;
}
export const OK_SHOWN_MS = 60_000;
export const MAX_OUTCOMES = 4;

/** The list once outcome `id` of `action` reached `state`: it moves to the front (keeping when
 * it started), replacing the action's earlier finished outcome. */
export function withOutcome(list: Outcome[], id: number, action: string, state: OutcomeState, text: string, now: number): Outcome[] {
  const others = list.filter((o) => o.id !== id && !(o.action === action && o.state !== "pending"));
  const started = list.find((o) => o.id === id)?.started ?? now;
  return [{ id, action, state, text, started, at: now }, ...others].slice(0, MAX_OUTCOMES);
}

/** Those still shown at `now`. */
export function shownOutcomes(list: Outcome[], now: number): Outcome[] {
  return list.filter((o) => o.state !== "ok" || now - o.at < OK_SHOWN_MS);
}

/** An action's failure as the outcome says it: the server's detail and status when it refused. */
export function failureText(error: unknown): string {
  return error instanceof ApiError ? `${error.detail}${error.status ? ` (${error.status})` : ""}` : String(error);
}
