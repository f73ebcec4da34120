// A task's log: live tail from the job stream (bounded), search, attempts, and download of the
// whole log from the REST API. Only the visible lines are in the DOM.
import { useEffect, useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { ApiError, api } from "../api/client";
import type { Task } from "../api/types";
import type { LogStore } from "../data/logs";
import { Empty } from "./common";

const LINE_HEIGHT = 18;
const OVERSCAN = 20;

export interface LogViewerProps {
  jobId: number;
  tasks: Task[];
  logs: LogStore;
  task: string | null;
  onTask: (task: string) => void;
  version: number;
}

export function LogViewer({ jobId, tasks, logs, task, onTask, version }: LogViewerProps) {
  const current = tasks.find((t) => t.name === task) ?? null;
  const [attemptChoice, setAttemptChoice] = useState<number | "latest">("latest");
  const [query, setQuery] = useState("");
  const [follow, setFollow] = useState(true);
  const [scrollTop, setScrollTop] = useState(0);
  const [download, setDownload] = useState<{ state: "idle" | "busy" | "error"; message?: string }>({ state: "idle" });
  const view = useRef<HTMLDivElement>(null);
  const [height, setHeight] = useState(340);

  useEffect(() => setAttemptChoice("latest"), [task]);
  const attempt = attemptChoice === "latest" ? (current?.attempt ?? 0) : attemptChoice;
  const buffer = task ? logs.get(task, attempt) : undefined;
  const bufferVersion = buffer?.version ?? -1;

  const attempts = useMemo(() => {
    const known = new Set<number>(task ? logs.attempts(task) : []);
    for (let i = 0; i <= (current?.attempt ?? 0); i++) known.add(i);
    return [...known].sort((a, b) => a - b);
  }, [task, current?.attempt, version]);

  // Indices of the lines to show: all, or those matching the search.
  const needle = query.trim().toLowerCase();
  const shown = useMemo(() => {
    if (!buffer) return [] as number[];
    const out: number[] = [];
    for (let i = 0; i < buffer.lines.length; i++) {
      if (!needle || (buffer.lines[i] as string).toLowerCase().includes(needle)) out.push(i);
    }
    return out;
  }, [buffer, bufferVersion, needle]);

  useEffect(() => {
    const element = view.current;
    if (!element) return;
    const observer = new ResizeObserver(() => setHeight(element.clientHeight));
    observer.observe(element);
    return () => observer.disconnect();
  }, []);

  // Follow the tail: keep the view at the bottom as lines arrive.
  useLayoutEffect(() => {
    const element = view.current;
    if (!element || !follow) return;
    element.scrollTop = element.scrollHeight;
    setScrollTop(element.scrollTop);
  }, [shown.length, bufferVersion, follow, task, attempt]);

  const onScroll = () => {
    const element = view.current;
    if (!element) return;
    setScrollTop(element.scrollTop);
    const atBottom = element.scrollTop + element.clientHeight >= element.scrollHeight - LINE_HEIGHT;
    if (atBottom !== follow) setFollow(atBottom);
  };

  const first = Math.max(0, Math.floor(scrollTop / LINE_HEIGHT) - OVERSCAN);
  const last = Math.min(shown.length, Math.ceil((scrollTop + height) / LINE_HEIGHT) + OVERSCAN);

  async function save() {
    if (!task) return;
    setDownload({ state: "busy" });
    try {
      const lines: string[] = [];
      let offset = 0;
      for (;;) {
        const page = await api.get("/jobs/{job_id}/tasks/{task}/logs", {
          path: { job_id: jobId, task },
          query: { attempt, offset, limit: 10_000 },
        });
        lines.push(...page.lines);
        offset = page.first_line + page.lines.length;
        if (page.lines.length === 0 || offset >= page.total_lines) break;
      }
      const blob = new Blob([lines.join("\n") + (lines.length ? "\n" : "")], { type: "text/plain" });
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = `job-${jobId}-${task.replace(":", "-")}.attempt${attempt}.log`;
      document.body.appendChild(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
      setDownload({ state: "idle" });
    } catch (error) {
      setDownload({ state: "error", message: error instanceof ApiError ? error.detail : String(error) });
    }
  }

  const lineCount = buffer ? buffer.numbers.filter((n) => n >= 0).length : 0;
  return (
    <section class="card" data-testid="log-viewer" data-task={task ?? ""} data-attempt={attempt} data-lines={lineCount}>
      <div class="card-head">
        <h2>Logs</h2>
        <div class="grow" />
        <div class="log-tools">
          <select
            value={task ?? ""}
            onChange={(e) => onTask((e.target as HTMLSelectElement).value)}
            data-testid="log-task-select"
            aria-label="Task"
          >
            {task ? null : <option value="">Choose a task…</option>}
            {tasks.map((t) => (
              <option key={t.name} value={t.name}>
                {t.name}
              </option>
            ))}
          </select>
          <select
            value={String(attemptChoice)}
            onChange={(e) => {
              const value = (e.target as HTMLSelectElement).value;
              setAttemptChoice(value === "latest" ? "latest" : Number(value));
            }}
            aria-label="Attempt"
            data-testid="log-attempt-select"
            disabled={!task}
          >
            <option value="latest">latest attempt</option>
            {attempts.map((a) => (
              <option key={a} value={String(a)}>
                attempt {a}
              </option>
            ))}
          </select>
          <input
            type="search"
            placeholder="Search"
            value={query}
            onInput={(e) => setQuery((e.target as HTMLInputElement).value)}
            data-testid="log-search"
            style={{ width: "180px" }}
          />
          {needle ? (
            <span class="muted nowrap" data-testid="log-matches">
              {shown.length} match{shown.length === 1 ? "" : "es"}
            </span>
          ) : null}
          <label class="row nowrap muted" style={{ gap: "4px" }}>
            <input
              type="checkbox"
              checked={follow}
              onChange={(e) => setFollow((e.target as HTMLInputElement).checked)}
              data-testid="log-follow"
            />
            Follow
          </label>
          <button type="button" onClick={save} disabled={!task || download.state === "busy"} data-testid="log-download">
            {download.state === "busy" ? <span class="spinner" /> : "↓"} Download
          </button>
        </div>
      </div>
      {download.state === "error" ? <div class="notice" style={{ margin: "8px 12px" }}>Download failed: {download.message}</div> : null}
      <div class="log-view" ref={view} onScroll={onScroll} data-testid="log-lines">
        {!task ? (
          <Empty title="No task chosen" compact>
            Pick a task above, or click one in the topology.
          </Empty>
        ) : shown.length === 0 ? (
          <Empty title={needle ? "No line matches" : "No output yet"} compact>
            {needle ? `Nothing in the loaded lines contains “${query}”.` : `${task} (attempt ${attempt}) has written nothing so far.`}
          </Empty>
        ) : (
          <div style={{ height: `${shown.length * LINE_HEIGHT}px`, position: "relative" }}>
            {shown.slice(first, last).map((index, k) => {
              const text = buffer?.lines[index] ?? "";
              const number = buffer?.numbers[index] ?? -1;
              return (
                <div
                  key={index}
                  class={`log-line${number < 0 ? " note" : ""}`}
                  style={{ top: `${(first + k) * LINE_HEIGHT}px` }}
                  data-testid="log-line"
                  title={text.length > 200 ? text.slice(0, 2000) : undefined}
                >
                  <span class="ln">{number >= 0 ? number + 1 : ""}</span>
                  <Highlight text={text} needle={needle} />
                </div>
              );
            })}
          </div>
        )}
      </div>
    </section>
  );
}

function Highlight({ text, needle }: { text: string; needle: string }) {
  if (!needle) return <>{text}</>;
  const lower = text.toLowerCase();
  const parts: preact.ComponentChildren[] = [];
  let from = 0;
  for (let at = lower.indexOf(needle); at >= 0; at = lower.indexOf(needle, from)) {
    if (at > from) parts.push(text.slice(from, at));
    parts.push(<mark key={at}>{text.slice(at, at + needle.length)}</mark>);
    from = at + needle.length;
  }
  parts.push(text.slice(from));
  return <>{parts}</>;
}
