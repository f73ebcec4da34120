import { useEffect, useState } from "preact/hooks";
import { getAccess, getMe, onAccess, READ_ONLY } from "./api/access";
import { clearToken, getToken, onAuthChange } from "./api/auth";
import { DialogHost } from "./components/ConfirmDialog";
import { ClusterPage } from "./pages/ClusterPage";
import { ComparePage } from "./pages/ComparePage";
import { JobPage } from "./pages/JobPage";
import { JobsPage } from "./pages/JobsPage";
import { LoginPage } from "./pages/LoginPage";
import { SweepPage } from "./pages/SweepPage";
import { SweepsPage } from "./pages/SweepsPage";
import { getConnection, onConnection } from "./ui/connection";
import { useSubscription } from "./ui/hooks";
import { chooseProject, currentProject, onProjectChange } from "./ui/project";
import { href, parseRoute, type Route } from "./ui/router";
import { applyTheme, currentTheme, onThemeChange, type Theme } from "./ui/theme";

export function App() {
  const [route, setRoute] = useState<Route>(() => parseRoute(location.hash));
  const [token, setTokenState] = useState(getToken());
  const [reason, setReason] = useState<string | null>(null);

  useEffect(() => {
    const onHash = () => setRoute(parseRoute(location.hash));
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  useEffect(
    () =>
      onAuthChange((why) => {
        setTokenState(getToken());
        setReason(why);
      }),
    [],
  );
  useEffect(() => {
    const titles: Record<Route["page"], string> = {
      jobs: "Jobs",
      job: "Job",
      cluster: "Cluster",
      compare: "Compare",
      sweeps: "Sweeps",
      sweep: "Sweep",
      missing: "Not found",
    };
    const title = route.page === "job" ? `Job ${route.id}` : route.page === "sweep" ? `Sweep ${route.id}` : titles[route.page];
    document.title = token ? `${title} · Strata` : "Sign in · Strata";
  }, [route, token]);

  return (
    <>
      <TopBar route={route} signedIn={token !== null} />
      {token === null ? (
        <LoginPage reason={reason} />
      ) : (
        <main>
          {route.page === "jobs" ? (
            <JobsPage />
          ) : route.page === "job" ? (
            <JobPage key={route.id} id={route.id} task={route.task} />
          ) : route.page === "cluster" ? (
            <ClusterPage />
          ) : route.page === "compare" ? (
            <ComparePage key={route.ids.join(",")} ids={route.ids} />
          ) : route.page === "sweeps" ? (
            <SweepsPage />
          ) : route.page === "sweep" ? (
            <SweepPage key={route.id} id={route.id} />
          ) : (
            <div class="state">
              <span class="title">Nothing at {route.hash}</span>
              <a href={href.jobs()}>Go to the jobs</a>
            </div>
          )}
        </main>
      )}
      <DialogHost />
    </>
  );
}

function TopBar({ route, signedIn }: { route: Route; signedIn: boolean }) {
  const [theme, setTheme] = useState<Theme>(currentTheme());
  useEffect(() => onThemeChange(setTheme), []);
  const onJobs = route.page === "jobs" || route.page === "job" || route.page === "compare";
  return (
    <header class="topbar">
      <a class="brand" href={href.jobs()}>
        <span class="brand-mark" aria-hidden="true">
          <i style={{ background: "#4f7cff" }} />
          <i style={{ background: "#37b99c" }} />
          <i style={{ background: "#f0a93b" }} />
        </span>
        Strata
      </a>
      {signedIn ? (
        <nav class="nav">
          <a href={href.jobs()} class={onJobs ? "active" : ""} data-testid="nav-jobs">
            Jobs
          </a>
          <a href={href.sweeps()} class={route.page === "sweeps" || route.page === "sweep" ? "active" : ""} data-testid="nav-sweeps">
            Sweeps
          </a>
          <a href={href.cluster()} class={route.page === "cluster" ? "active" : ""} data-testid="nav-cluster">
            Cluster
          </a>
        </nav>
      ) : null}
      <span class="spacer" />
      {signedIn ? <ProjectSwitcher /> : null}
      {signedIn ? <ViewerTag /> : null}
      {signedIn ? <ConnectionIndicator /> : null}
      <button
        type="button"
        class="icon ghost"
        onClick={() => applyTheme(theme === "dark" ? "light" : "dark")}
        title={`Switch to the ${theme === "dark" ? "light" : "dark"} theme`}
        aria-label="Toggle theme"
        data-testid="theme-toggle"
        data-theme={theme}
      >
        {theme === "dark" ? <SunIcon /> : <MoonIcon />}
      </button>
      {signedIn ? (
        <button type="button" class="ghost" onClick={() => clearToken(null)} data-testid="sign-out">
          Sign out
        </button>
      ) : null}
    </header>
  );
}

/** Which project's jobs the pages show; the caller's own projects only (GET /me). */
function ProjectSwitcher() {
  useSubscription(onAccess);
  useSubscription(onProjectChange);
  const me = getMe();
  if (me === null) return null;
  const chosen = currentProject();
  // A remembered project this token has no role in shows as "every project".
  const known = me.projects.some((project) => project.name === chosen);
  return (
    <label class="project-switcher" title={me.user ? `Signed in as ${me.user}` : undefined}>
      {me.user ? (
        <span class="muted" data-testid="signed-in-as">
          {me.user}
        </span>
      ) : null}
      <select
        value={known ? chosen : ""}
        onChange={(e) => chooseProject((e.target as HTMLSelectElement).value)}
        aria-label="Project"
        data-testid="project-switcher"
      >
        <option value="">All projects</option>
        {me.projects.map((project) => (
          <option key={project.id} value={project.name} data-role={project.role}>
            {project.name} · {project.role}
          </option>
        ))}
      </select>
    </label>
  );
}

function ViewerTag() {
  useSubscription(onAccess);
  if (getAccess() !== "viewer") return null;
  return (
    <span class="tag" title={READ_ONLY} data-testid="read-only">
      Viewer · read only
    </span>
  );
}

function ConnectionIndicator() {
  useSubscription(onConnection);
  const state = getConnection();
  if (!state) return null;
  const [cls, text] =
    state.kind === "live"
      ? ["live", "Live"]
      : state.kind === "loading"
        ? ["", "Loading history…"]
        : state.kind === "connecting"
          ? ["waiting", state.attempt ? "Reconnecting…" : "Connecting…"]
          : state.kind === "waiting"
            ? ["waiting", `Reconnecting in ${Math.ceil(state.retryInMs / 1000)} s`]
            : ["", "Offline"];
  const title = state.kind === "waiting" ? state.reason : undefined;
  return (
    <span class={`conn ${cls}`} data-testid="connection" data-state={state.kind} title={title}>
      <i />
      {text}
    </span>
  );
}

function SunIcon() {
  return (
    <svg width="18" height="18" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" aria-hidden="true">
      <circle cx="12" cy="12" r="4.5" />
      <path d="M12 2v2M12 20v2M4.9 4.9l1.4 1.4M17.7 17.7l1.4 1.4M2 12h2M20 12h2M4.9 19.1l1.4-1.4M17.7 6.3l1.4-1.4" />
    </svg>
  );
}

function MoonIcon() {
  return (
    <svg width="18" height="18" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linejoin="round" aria-hidden="true">
      <path d="M20.5 14.5A8.5 8.5 0 0 1 9.5 3.5a8.5 8.5 0 1 0 11 11z" />
    </svg>
  );
}
