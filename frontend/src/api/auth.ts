// The admin token: taken from ?token= once (then removed from the URL), kept per tab in
// sessionStorage. Any 401 clears it and sends the app back to the login page.
const KEY = "strata.token";
type Listener = (reason: string | null) => void;
const listeners = new Set<Listener>();

export function getToken(): string | null {
  try {
    return sessionStorage.getItem(KEY);
  } catch {
    return null;
  }
}

export function setToken(token: string): void {
  sessionStorage.setItem(KEY, token.trim());
  for (const listener of listeners) listener(null);
}

export function clearToken(reason: string | null = null): void {
  sessionStorage.removeItem(KEY);
  for (const listener of listeners) listener(reason);
}

export function onAuthChange(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** The server refused the token: back to the login page (once, with the first reason). */
export function signalUnauthorized(reason = "The server refused the token (401). Paste a valid one."): void {
  if (getToken() !== null) clearToken(reason);
}

/** Move a `?token=` from the address into storage, and out of the address bar and history. */
export function adoptTokenFromUrl(): void {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token === null) return;
  url.searchParams.delete("token");
  if (token.trim()) sessionStorage.setItem(KEY, token.trim());
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
}
