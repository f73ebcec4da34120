// Runs a page's actions one call each: an outcome that says it is pending, then what the server
// answered (or why it refused), and which controls are busy meanwhile.
import { useState } from "preact/hooks";
import { failureText, type Outcome, type OutcomeState, withOutcome } from "../data/outcomes";

// Outcome ids stay unique across pages, so a remounted page never reuses a key.
let outcomeIds = 0;

export interface ActionRunner {
  outcomes: Outcome[];
  busy: Set<string>;
  /** Run `call` as `action`; its answer is the outcome's text. `busyKey` is the control it busies. */
  run: (action: string, pending: string, call: () => Promise<string>, busyKey?: string) => Promise<void>;
  dismiss: (id: number) => void;
}

/** `settled` runs after every action, whatever its outcome (the page reads its job again). */
export function useActionRunner(settled: () => void): ActionRunner {
  const [outcomes, setOutcomes] = useState<Outcome[]>([]);
  const [busy, setBusy] = useState<Set<string>>(new Set());

  function report(action: string, state: OutcomeState, text: string, outcomeId?: number): number {
    const key = outcomeId ?? ++outcomeIds;
    setOutcomes((list) => withOutcome(list, key, action, state, text, Date.now()));
    return key;
  }

  async function run(action: string, pending: string, call: () => Promise<string>, busyKey = action) {
    const key = report(action, "pending", pending);
    setBusy((s) => new Set(s).add(busyKey));
    try {
      report(action, "ok", await call(), key);
    } catch (error) {
      report(action, "error", failureText(error), key);
    } finally {
      setBusy((s) => {
        const next = new Set(s);
        next.delete(busyKey);
        return next;
      });
      settled();
    }
  }

  const dismiss = (id: number) => setOutcomes((list) => list.filter((x) => x.id !== id));
  return { outcomes, busy, run, dismiss };
}
