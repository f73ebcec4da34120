// Submit a job spec written as YAML or JSON. The server's 422 names each bad field; the
// message is listed under the editor and the line that holds the field is marked. A job runs
// in the agents' workspace, or in a code bundle already on the server: its digest, given in
// the form, becomes the spec's `code.sha256` (the server says so when it has no such bundle).
import { useMemo, useRef, useState } from "preact/hooks";
import { getAccess, getMe, onAccess, READ_ONLY, submittable } from "../api/access";
import { ApiError, api } from "../api/client";
import type { FieldIssue, Job } from "../api/types";
import { EXAMPLES } from "../data/examples";
import { contentType, detectFormat, locateField, type SpecFormat, withCodeBundle, withProject } from "../data/specText";
import { currentProject, onProjectChange } from "../ui/project";
import { useSubscription } from "../ui/hooks";

const DRAFT_KEY = "strata.spec-draft";

function initialText(): string {
  try {
    return sessionStorage.getItem(DRAFT_KEY) ?? (EXAMPLES[0]?.text ?? "");
  } catch {
    return EXAMPLES[0]?.text ?? "";
  }
}

export function SubmitForm({ onSubmitted }: { onSubmitted: (job: Job) => void }) {
  const [text, setText] = useState(initialText);
  const [format, setFormat] = useState<"auto" | SpecFormat>("auto");
  const [busy, setBusy] = useState(false);
  const [issues, setIssues] = useState<FieldIssue[]>([]);
  const [failure, setFailure] = useState<string | null>(null);
  const [issuesFor, setIssuesFor] = useState<string | null>(null);
  const [digest, setDigest] = useState("");
  const area = useRef<HTMLTextAreaElement>(null);
  useSubscription(onAccess);
  useSubscription(onProjectChange);
  const projects = submittable();
  const me = getMe();
  // A user who is only a viewer everywhere may not submit; unknown access leaves it to the server.
  const readOnly = getAccess() === "viewer" || (me !== null && projects.length === 0);
  const [pickedProject, setPickedProject] = useState<string | null>(null);
  const names = projects.map((project) => project.name);
  const project =
    [pickedProject, currentProject(), me?.default_project].find((name) => name && names.includes(name)) ?? names[0] ?? null;
  const gutter = useRef<HTMLDivElement>(null);
  const sent: SpecFormat = format === "auto" ? detectFormat(text) : format;

  // The server names code.sha256 for a digest it does not know: that goes beside the field.
  const isBundleIssue = (issue: FieldIssue) => digest.trim() !== "" && issue.field.startsWith("code");
  const bundleIssues = issues.filter(isBundleIssue);
  const specIssues = issues.filter((issue) => !isBundleIssue(issue));

  const lineCount = text.split("\n").length;
  // Marks stay on the text they were computed for; an edit clears them.
  const marked = useMemo(() => {
    const lines = new Map<number, string>();
    if (issuesFor !== text) return lines;
    for (const issue of issues.filter((x) => !isBundleIssue(x))) {
      const line = locateField(text, issue.field, issue.message);
      if (line !== null && !lines.has(line)) lines.set(line, issue.field || "document");
    }
    return lines;
  }, [issues, digest, issuesFor, text]);

  function update(value: string) {
    setText(value);
    try {
      sessionStorage.setItem(DRAFT_KEY, value);
    } catch {
      /* storage off */
    }
  }

  function goTo(issue: FieldIssue) {
    const line = locateField(text, issue.field, issue.message);
    const element = area.current;
    if (line === null || !element) return;
    const lines = text.split("\n");
    const start = lines.slice(0, line).reduce((n, l) => n + l.length + 1, 0);
    element.focus();
    element.setSelectionRange(start, start + (lines[line]?.length ?? 0));
    element.scrollTop = Math.max(0, line * 19 - 60);
  }

  async function submit(event: Event) {
    event.preventDefault();
    setBusy(true);
    setIssues([]);
    setFailure(null);
    const bundle = digest.trim();
    try {
      const bundled = bundle ? withCodeBundle(text, sent, bundle) : text;
      const body = project ? withProject(bundled, sent, project) : bundled;
      const job = await api.post("/jobs", { raw: { text: body, contentType: contentType(sent) } });
      onSubmitted(job);
    } catch (error) {
      if (error instanceof ApiError) {
        if (error.issues.length) {
          setIssues(error.issues);
          setIssuesFor(text);
          const onlyBundle = bundle !== "" && error.issues.every((issue) => issue.field.startsWith("code"));
          setFailure(onlyBundle ? null : error.status === 422 ? "The server refused the spec:" : error.detail);
        } else {
          setFailure(error.detail);
        }
      } else {
        setFailure(String(error));
      }
    } finally {
      setBusy(false);
    }
  }

  return (
    <section class="card" data-testid="submit-form">
      <div class="card-head">
        <h2>Submit a job</h2>
        <div class="grow" />
        <select
          aria-label="Start from an example"
          value=""
          onChange={(e) => {
            const example = EXAMPLES.find((x) => x.id === (e.target as HTMLSelectElement).value);
            if (example) {
              update(example.text);
              setIssues([]);
              setFailure(null);
            }
          }}
        >
          <option value="">Examples…</option>
          {EXAMPLES.map((x) => (
            <option key={x.id} value={x.id}>
              {x.label}
            </option>
          ))}
        </select>
      </div>
      <form class="card-body" onSubmit={submit}>
        <div class="editor">
          <div class="gutter" ref={gutter} aria-hidden="true">
            {Array.from({ length: lineCount }, (_, i) => (
              <div key={i} class={marked.has(i) ? "bad" : ""} title={marked.get(i)} data-testid={marked.has(i) ? "spec-error-line" : undefined} data-line={i + 1}>
                {i + 1}
              </div>
            ))}
          </div>
          <textarea
            ref={area}
            value={text}
            spellcheck={false}
            rows={18}
            onInput={(e) => update((e.target as HTMLTextAreaElement).value)}
            onScroll={(e) => {
              if (gutter.current) gutter.current.scrollTop = (e.target as HTMLTextAreaElement).scrollTop;
            }}
            aria-label="Job spec (YAML or JSON)"
            data-testid="spec-editor"
          />
        </div>
        {failure ? (
          <div class="notice" data-testid="submit-error" role="alert">
            {failure}
          </div>
        ) : null}
        {specIssues.length ? (
          <ul class="field-errors" data-testid="spec-errors">
            {specIssues.map((issue, i) => (
              <li key={i} data-testid="spec-error" data-field={issue.field} onClick={() => goTo(issue)} title="Show in the editor">
                <code>{issue.field || "spec"}</code>
                <span>{issue.message}</span>
              </li>
            ))}
          </ul>
        ) : null}
        <label class="bundle-field">
          <span class="muted">Code bundle (SHA-256)</span>
          <input
            type="text"
            class="mono"
            value={digest}
            placeholder="none: the job runs in the agents' workspace"
            spellcheck={false}
            autocomplete="off"
            maxLength={200}
            onInput={(e) => setDigest((e.target as HTMLInputElement).value)}
            aria-invalid={bundleIssues.length ? "true" : undefined}
            data-testid="bundle-digest-input"
          />
          <span class="faint hint">
            A bundle already uploaded (<code>strata submit --code DIR</code> uploads one); it becomes the spec's{" "}
            <code>code.sha256</code>.
          </span>
        </label>
        {bundleIssues.map((issue, i) => (
          <div key={i} class="notice bundle-error" role="alert" data-testid="bundle-error" data-field={issue.field}>
            {issue.message}
          </div>
        ))}
        <div class="row" style={{ marginTop: "12px", flexWrap: "wrap" }}>
          {projects.length ? (
            <label class="row muted nowrap" style={{ gap: "6px" }} title="Where the job goes, unless the spec names a project">
              Project
              <select value={project ?? ""} onChange={(e) => setPickedProject((e.target as HTMLSelectElement).value)} data-testid="submit-project">
                {projects.map((p) => (
                  <option key={p.id} value={p.name}>
                    {p.name}
                  </option>
                ))}
              </select>
            </label>
          ) : null}
          <label class="row muted nowrap" style={{ gap: "6px" }}>
            Send as
            <select
              value={format}
              onChange={(e) => setFormat((e.target as HTMLSelectElement).value as "auto" | SpecFormat)}
              data-testid="spec-format"
            >
              <option value="auto">auto ({detectFormat(text).toUpperCase()})</option>
              <option value="yaml">YAML</option>
              <option value="json">JSON</option>
            </select>
          </label>
          <div class="grow" />
          <button
            type="submit"
            class="primary"
            disabled={readOnly || busy || !text.trim()}
            title={readOnly ? (getAccess() === "viewer" ? READ_ONLY : "Read only: you are a viewer of every project you belong to") : undefined}
            data-testid="submit-job"
          >
            {busy ? <span class="spinner" /> : null}
            Submit job
          </button>
        </div>
      </form>
    </section>
  );
}
