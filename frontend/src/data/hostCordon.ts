// A host's cordon in the words `strata hosts` uses (backend/cli/hosts.py), the faults its
// agent reported, and what the cluster page's uncordon says while it runs and once done.
import type { Host } from "../api/types";

type CordonFields = Pick<Host, "cordon_reason" | "cordon_cause" | "faults" | "warnings">;
type Fault = NonNullable<Host["faults"]>[number];

/** "GPU 1: uncorrectable ECC errors (3)", "/data: 200 MiB free, below 1 GiB". */
export function faultWords(fault: Fault): string {
  if (fault.device !== null && fault.device !== undefined) return `GPU ${fault.device}: ${fault.detail}`;
  if (fault.path !== null && fault.path !== undefined) return `${fault.path}: ${fault.detail}`;
  return fault.detail;
}

/** "cordoned: REASON", or null for a host that takes tasks. */
export function cordonLabel(host: CordonFields): string | null {
  if (host.cordon_reason === null || host.cordon_reason === undefined) return null;
  return `cordoned: ${host.cordon_reason}`;
}

/** The badge's tooltip: who cordoned it, and what its agent reports now. */
export function cordonDetail(host: CordonFields): string {
  const by = { manual: "an operator", fault: "a fault", failures: "infrastructure failures" }[host.cordon_cause ?? "manual"];
  const lines = [`Takes no new task (cordoned by ${by}); what runs there goes on.`];
  const faults = host.faults ?? [];
  const warnings = host.warnings ?? [];
  if (faults.length) lines.push(`Faults now: ${faults.map(faultWords).join("; ")}`);
  if (warnings.length) lines.push(`Warnings: ${warnings.map(faultWords).join("; ")}`);
  return lines.join("\n");
}

export const uncordonPending = (name: string): string => `Clearing the cordon of ${name}…`;

export function uncordonDone(host: Pick<Host, "name"> & CordonFields): string {
  const still = (host.faults ?? []).map(faultWords);
  return still.length ? `${host.name} takes tasks again (still reported, acknowledged: ${still.join("; ")}).` : `${host.name} takes tasks again.`;
}
