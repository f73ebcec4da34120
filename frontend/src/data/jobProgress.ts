// The one-line progress summary in the job page's header, from the newest points.
import { metric } from "../ui/format";
import type { Series } from "./series";

/** "epoch 4 · step 80 · loss 0.31 · 12 steps/s" from the newest points; with `steps: false`
 * the loss alone (the runtime's progress report says the rest). */
export function progressSummary(series: Series[], { steps: withSteps = true } = {}): string {
  const find = (name: string) => series.find((s) => s.name === name && s.length > 0);
  const parts: string[] = [];
  const epoch = withSteps ? find("epoch") : undefined;
  if (epoch) parts.push(`epoch ${metric(epoch.latest())}`);
  const steps = series.reduce((m, s) => (s.length && !s.name.startsWith("eval/") ? Math.max(m, s.steps[s.length - 1] as number) : m), -1);
  if (withSteps && steps >= 0) parts.push(`step ${steps}`);
  const loss = find("loss") ?? find("batch/loss");
  if (loss) parts.push(`loss ${metric(loss.latest())}`);
  const rate = withSteps ? find("steps_per_sec") : undefined;
  if (rate) parts.push(`${metric(rate.latest())} steps/s`);
  return parts.join(" · ");
}
