// What the signed-in token may do, and where. The server says it once per token (GET /me): an
// admin token controls every project, a viewer token reads every project, a user token has a
// role in each of its projects (viewer reads; member and admin also control the jobs). The
// dashboard greys out what the caller may not do instead of letting each click end in a 403.
import { getToken, onAuthChange } from "./auth";
import { api } from "./client";
import type { components } from "./schema";

export type Me = components["schemas"]["Me"];
export type MyProject = components["schemas"]["MyProject"];
export type ProjectRole = MyProject["role"];
export type Access = Me["kind"] | "unknown";

/** The title of a control the caller may not use. */
export const READ_ONLY = "Read only: signed in with a viewer token";
export const readOnlyIn = (project: string): string => `Read only: you are a viewer of project ${project}`;

let state: { token: string | null; me: Me | null } = { token: null, me: null };
const listeners = new Set<() => void>();

function set(token: string | null, me: Me | null): void {
  state = { token, me };
  for (const listener of listeners) listener();
}

async function load(token: string): Promise<void> {
  try {
    const me = await api.get("/me");
    if (getToken() === token) set(token, me);
  } catch {
    // Unknown (the server is unreachable): the controls stay on and the server still refuses
    // what the token may not do.
    if (getToken() === token) set(token, null);
  }
}

/** Who the current token is; asks the server the first time a token is seen. */
export function getMe(): Me | null {
  const token = getToken();
  if (token !== state.token) {
    state = { token, me: null };
    if (token !== null) void load(token);
  }
  return state.me;
}

export function getAccess(): Access {
  return getMe()?.kind ?? "unknown";
}

/** The caller's role in a project (by id), or null when they have none or it is not known yet. */
export function roleIn(projectId: number): ProjectRole | null {
  return getMe()?.projects.find((project) => project.id === projectId)?.role ?? null;
}

export function projectName(projectId: number): string {
  return getMe()?.projects.find((project) => project.id === projectId)?.name ?? `#${projectId}`;
}

/** Why the caller may not control a project's jobs, or null when they may (or it is unknown). */
export function readOnlyReason(projectId: number): string | null {
  const me = getMe();
  if (me === null) return null;
  if (me.kind === "viewer") return READ_ONLY;
  if (me.kind === "admin") return null;
  return roleIn(projectId) === "viewer" ? readOnlyIn(projectName(projectId)) : null;
}

/** The projects the caller may submit to (member or admin of them). */
export function submittable(): MyProject[] {
  const me = getMe();
  if (me === null || me.kind === "viewer") return [];
  return me.projects.filter((project) => project.role !== "viewer");
}

export function onAccess(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

onAuthChange(() => getMe());
