// An in-page confirmation (not window.confirm: tests and keyboards can drive it).
import { useEffect, useRef, useState } from "preact/hooks";

export interface ConfirmRequest {
  title: string;
  body: string;
  confirmLabel: string;
  danger?: boolean;
}
interface Pending extends ConfirmRequest {
  resolve: (ok: boolean) => void;
}

let show: ((request: Pending) => void) | null = null;

/** Ask; resolves true when confirmed, false when cancelled. */
export function confirmAction(request: ConfirmRequest): Promise<boolean> {
  return new Promise((resolve) => {
    if (!show) {
      resolve(false);
      return;
    }
    show({ ...request, resolve });
  });
}

export function DialogHost() {
  const [pending, setPending] = useState<Pending | null>(null);
  const confirmRef = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    show = (request) => setPending(request);
    return () => {
      show = null;
    };
  }, []);
  useEffect(() => {
    if (!pending) return;
    confirmRef.current?.focus();
    const onKey = (event: KeyboardEvent) => {
      if (event.key === "Escape") close(false);
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [pending]);
  if (!pending) return null;
  function close(ok: boolean) {
    pending?.resolve(ok);
    setPending(null);
  }
  return (
    <div class="backdrop" onClick={(e) => e.target === e.currentTarget && close(false)}>
      <div class="dialog" role="dialog" aria-modal="true" aria-labelledby="confirm-title" data-testid="confirm-dialog">
        <h2 id="confirm-title">{pending.title}</h2>
        <p>{pending.body}</p>
        <div class="buttons">
          <button type="button" onClick={() => close(false)} data-testid="confirm-cancel">
            Keep it
          </button>
          <button
            type="button"
            ref={confirmRef}
            class={pending.danger ? "danger solid" : "primary"}
            onClick={() => close(true)}
            data-testid="confirm-ok"
          >
            {pending.confirmLabel}
          </button>
        </div>
      </div>
    </div>
  );
}
