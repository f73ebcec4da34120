// An in-page confirmation (not window.confirm: tests and keyboards can drive it), optionally
// with one choice to make before confirming (a drain's deadline).
import { useEffect, useRef, useState } from "preact/hooks";

export interface ConfirmChoice {
  label: string;
  options: { value: string; label: string }[];
  initial: string;
}
export interface ConfirmRequest {
  title: string;
  body: string;
  confirmLabel: string;
  danger?: boolean;
  choice?: ConfirmChoice;
}
interface Pending extends ConfirmRequest {
  /** The choice's value when confirmed, null when cancelled. */
  resolve: (chosen: string | null) => void;
}

let show: ((request: Pending) => void) | null = null;

/** Ask; resolves with the choice's value ("" without one) when confirmed, null when cancelled. */
export function confirmChoice(request: ConfirmRequest): Promise<string | null> {
  return new Promise((resolve) => {
    if (!show) {
      resolve(null);
      return;
    }
    show({ ...request, resolve });
  });
}

/** Ask; resolves true when confirmed, false when cancelled. */
export async function confirmAction(request: ConfirmRequest): Promise<boolean> {
  return (await confirmChoice(request)) !== null;
}

export function DialogHost() {
  const [pending, setPending] = useState<Pending | null>(null);
  const [chosen, setChosen] = useState("");
  const confirmRef = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    show = (request) => {
      setChosen(request.choice?.initial ?? "");
      setPending(request);
    };
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
    pending?.resolve(ok ? chosen : null);
    setPending(null);
  }
  const choice = pending.choice;
  return (
    <div class="backdrop" onClick={(e) => e.target === e.currentTarget && close(false)}>
      <div class="dialog" role="dialog" aria-modal="true" aria-labelledby="confirm-title" data-testid="confirm-dialog">
        <h2 id="confirm-title">{pending.title}</h2>
        <p>{pending.body}</p>
        {choice ? (
          <label class="dialog-choice">
            <span class="muted">{choice.label}</span>
            <select value={chosen} onChange={(e) => setChosen((e.target as HTMLSelectElement).value)} data-testid="confirm-choice">
              {choice.options.map((option) => (
                <option key={option.value} value={option.value}>
                  {option.label}
                </option>
              ))}
            </select>
          </label>
        ) : null}
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
