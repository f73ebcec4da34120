// The job's checkpoints: those listed by the REST API on load and those the stream announces.
import { useRef } from "preact/hooks";
import type { Checkpoint } from "../api/types";
import { bytes, clock, metric } from "../ui/format";
import { Empty } from "./common";

export function CheckpointsTable({ rows, loading, error }: { rows: Checkpoint[]; loading: boolean; error: string | null }) {
  // Rows that were not there on the first render get a short highlight.
  const seen = useRef<Set<string> | null>(null);
  const fresh = new Set<string>();
  if (seen.current === null) seen.current = new Set(rows.map((r) => r.name));
  else for (const r of rows) if (!seen.current.has(r.name)) fresh.add(r.name);
  for (const name of fresh) seen.current.add(name);

  if (rows.length === 0) {
    if (error) return <Empty title="Checkpoints could not be loaded" compact>{error}</Empty>;
    if (loading) return <Empty title="Loading checkpoints…" compact />;
    return (
      <Empty title="No checkpoints yet" compact>
        They appear as the chief writes them, or press Checkpoint now.
      </Empty>
    );
  }
  return (
    <div style={{ maxHeight: "320px", overflow: "auto" }}>
      <table class="data" data-testid="checkpoints-table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Step</th>
            <th>Trigger</th>
            <th>Format</th>
            <th>Loss</th>
            <th>Size</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((c) => (
            <tr
              key={c.name}
              class={`${c.deleted_at ? "deleted" : ""}${fresh.has(c.name) ? " fresh" : ""}`}
              data-testid="checkpoint-row"
              data-name={c.name}
              data-trigger={c.trigger ?? ""}
              data-format={c.format}
              title={`${c.path}\nepoch ${c.epoch ?? "–"} · written ${clock(c.created_at)}${c.deleted_at ? " · deleted by retention" : ""}`}
            >
              <td class="mono nowrap">{c.name}</td>
              <td class="num">{c.step ?? "–"}</td>
              <td>
                <span class="tag">{c.trigger ?? "–"}</span>
              </td>
              <td class="nowrap" data-testid="checkpoint-format" title={c.keras ?? undefined}>
                {c.format}
              </td>
              <td class="num">{metric(c.metrics.loss ?? null)}</td>
              <td class="num nowrap">{bytes(c.size_bytes)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
