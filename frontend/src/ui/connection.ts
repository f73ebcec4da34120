// The state of the page's live stream, for the indicator in the top bar.
import type { StreamState } from "../stream/client";

let state: StreamState | null = null;
const listeners = new Set<() => void>();

export function setConnection(next: StreamState | null): void {
  state = next;
  for (const listener of listeners) listener();
}
export function getConnection(): StreamState | null {
  return state;
}
export function onConnection(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}
