// The cluster page's drain and undrain. A drain asks first, with a deadline to choose; each
// answer updates its host at once (the page's next read would take up to a poll).
import { api } from "../api/client";
import type { Host } from "../api/types";
import { confirmChoice } from "../components/ConfirmDialog";
import { uncordonDone, uncordonPending } from "../data/hostCordon";
import { deadlineSeconds, drainConfirm, drainDone, drainPending, undrainDone, undrainPending } from "../data/hostDrain";
import type { Outcome } from "../data/outcomes";
import { useActionRunner } from "./useActionRunner";

export interface HostDrain {
  outcomes: Outcome[];
  dismiss: (id: number) => void;
  /** Names of the hosts whose drain or undrain runs. */
  busy: Set<string>;
  drain: (host: Host) => Promise<void>;
  undrain: (host: Host) => Promise<void>;
  uncordon: (host: Host) => Promise<void>;
}

export function useHostDrain(refresh: () => void, answered: (host: Host) => void): HostDrain {
  const { outcomes, busy, run, dismiss } = useActionRunner(refresh);

  const drain = async (host: Host) => {
    const chosen = await confirmChoice(drainConfirm(host));
    if (chosen === null) return;
    await run(
      `drain ${host.name}`,
      drainPending(host.name),
      async () => {
        const query = { deadline_seconds: deadlineSeconds(chosen) };
        const drained = await api.post("/hosts/{name}/drain", { path: { name: host.name }, query });
        answered(drained);
        return drainDone(drained);
      },
      host.name,
    );
  };

  const undrain = (host: Host) =>
    run(
      `undrain ${host.name}`,
      undrainPending(host.name),
      async () => {
        const back = await api.delete("/hosts/{name}/drain", { path: { name: host.name } });
        answered(back);
        return undrainDone(back);
      },
      host.name,
    );

  const uncordon = (host: Host) =>
    run(
      `uncordon ${host.name}`,
      uncordonPending(host.name),
      async () => {
        const cleared = await api.post("/hosts/{name}/uncordon", { path: { name: host.name } });
        answered(cleared);
        return uncordonDone(cleared);
      },
      host.name,
    );

  return { outcomes, dismiss, busy, drain, undrain, uncordon };
}
