// What the signed-in token may do. An admin token changes things; a viewer token only reads,
// so the dashboard greys out its controls instead of letting each click end in a 403. The
// server says which kind a token is (GET /tokens/self), once per token.
import { getToken, onAuthChange } from "./auth";
import { api } from "./client";

export type Access = "admin" | "viewer" | "unknown";

/** The title of a control a viewer token may not use. */
export const READ_ONLY = "Read only: signed in with a viewer token";

let access: { token: string | null; kind: Access } = { token: null, kind: "unknown" };
const listeners = new Set<() => void>();

function set(token: string | null, kind: Access): void {
  if (access.token === token && access.kind === kind) return;
  access = { token, kind };
  for (const listener of listeners) listener();
}

async function load(token: string): Promise<void> {
  try {
    const self = await api.get("/tokens/self");
    if (getToken() === token) set(token, self.kind);
  } catch {
    // Unknown (the server is unreachable, or older): the controls stay on and the server
    // still refuses what the token may not do.
    if (getToken() === token) set(token, "unknown");
  }
}

/** The kind of the current token; asks the server the first time a token is seen. */
export function getAccess(): Access {
  const token = getToken();
  if (token !== access.token) {
    access = { token, kind: "unknown" };
    if (token !== null) void load(token);
  }
  return access.kind;
}

export function onAccess(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

onAuthChange(() => getAccess());
