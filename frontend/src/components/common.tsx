import type { ComponentChildren } from "preact";

export function StatusBadge({ status, testid = "status-badge" }: { status: string; testid?: string }) {
  const live = status === "running" || status === "restarting" || status === "scheduled";
  return (
    <span class={`badge s-${status}${live ? " pulse" : ""}`} data-testid={testid} data-status={status}>
      {status}
    </span>
  );
}

export function Loading({ what, compact }: { what: string; compact?: boolean }) {
  return (
    <div class={`state${compact ? " compact" : ""}`} data-testid="loading">
      <span class="spinner" />
      <span>Loading {what}…</span>
    </div>
  );
}

export function Empty({ title, children, compact }: { title: string; children?: ComponentChildren; compact?: boolean }) {
  return (
    <div class={`state${compact ? " compact" : ""}`} data-testid="empty">
      <span class="title">{title}</span>
      {children ? <span>{children}</span> : null}
    </div>
  );
}

export function ErrorState({
  title,
  detail,
  retry,
  compact,
}: {
  title: string;
  detail?: string | null;
  retry?: () => void;
  compact?: boolean;
}) {
  return (
    <div class={`state error${compact ? " compact" : ""}`} data-testid="error">
      <span class="title">{title}</span>
      {detail ? <span>{detail}</span> : null}
      {retry ? (
        <button type="button" class="small" onClick={retry}>
          Try again
        </button>
      ) : null}
    </div>
  );
}

export function Card({
  title,
  right,
  children,
  flush,
  testid,
  class: className,
}: {
  title: ComponentChildren;
  right?: ComponentChildren;
  children: ComponentChildren;
  flush?: boolean;
  testid?: string;
  class?: string;
}) {
  return (
    <section class={`card${className ? ` ${className}` : ""}`} data-testid={testid}>
      <div class="card-head">
        <h2>{title}</h2>
        <div class="grow" />
        {right}
      </div>
      <div class={`card-body${flush ? " flush" : ""}`}>{children}</div>
    </section>
  );
}
