// Paste a user token (your projects, with your role in each), the admin token (`strata up`
// prints a URL that carries it), or a viewer token to look without changing anything. The token
// is checked against the server before it is kept.
import { useState } from "preact/hooks";
import { setToken } from "../api/auth";

export function LoginPage({ reason }: { reason: string | null }) {
  const [value, setValue] = useState("");
  const [state, setState] = useState<{ busy: boolean; error: string | null }>({ busy: false, error: null });

  async function submit(event: Event) {
    event.preventDefault();
    const token = value.trim();
    if (!token) return;
    setState({ busy: true, error: null });
    try {
      const response = await fetch("/me", {
        headers: { Authorization: `Bearer ${token}`, Accept: "application/json" },
      });
      if (response.status === 401 || response.status === 403) {
        setState({ busy: false, error: "The server does not accept this token." });
        return;
      }
      if (!response.ok) {
        setState({ busy: false, error: `The server answered ${response.status}.` });
        return;
      }
      setToken(token);
    } catch (error) {
      setState({ busy: false, error: `The server cannot be reached (${(error as Error).message}).` });
    }
  }

  return (
    <div class="login" data-testid="login-page">
      <div class="card">
        <h1>Sign in to Strata</h1>
        <p>
          Paste your user token: you see your projects' jobs and act on them as your role in each allows.{" "}
          <code>strata up</code> prints one for its first user, and a dashboard URL that carries the admin token (kept in{" "}
          <code>&lt;data dir&gt;/tokens.json</code>). A viewer token (<code>strata tokens create NAME</code>) shows
          everything and changes nothing.
        </p>
        {reason ? (
          <div class="notice" style={{ marginTop: 0, marginBottom: "12px" }} data-testid="login-reason">
            {reason}
          </div>
        ) : null}
        <form onSubmit={submit}>
          <input
            type="password"
            placeholder="User, admin or viewer token"
            autocomplete="off"
            value={value}
            onInput={(e) => setValue((e.target as HTMLInputElement).value)}
            data-testid="token-input"
            aria-label="Token"
            autoFocus
          />
          {state.error ? (
            <div class="error-text" data-testid="login-error">
              {state.error}
            </div>
          ) : null}
          <button type="submit" class="primary" disabled={state.busy || !value.trim()} data-testid="login-submit">
            {state.busy ? <span class="spinner" /> : null}
            Sign in
          </button>
        </form>
      </div>
    </div>
  );
}
