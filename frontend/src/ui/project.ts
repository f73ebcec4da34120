// The project the dashboard shows ("" = every project the caller has a role in): chosen in the
// top bar, remembered per browser, and the project a job from the form goes to.
const KEY = "strata.project";
const listeners = new Set<() => void>();

function saved(): string {
  try {
    return localStorage.getItem(KEY) ?? "";
  } catch {
    return "";
  }
}

let current = saved();

export function currentProject(): string {
  return current;
}

export function chooseProject(name: string): void {
  if (name === current) return;
  current = name;
  try {
    localStorage.setItem(KEY, name);
  } catch {
    /* storage off */
  }
  for (const listener of listeners) listener();
}

export function onProjectChange(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}
