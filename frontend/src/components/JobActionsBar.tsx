// The job page's controls: TensorBoard, checkpoint now, the evaluator toggle, suspend or resume,
// restart and cancel.
// Each is off while the caller may only look (`readOnlyWhy` says why), while the server says it
// does not apply, or while it runs.
import { tensorBoardUrl } from "../api/client";
import type { Job } from "../api/types";
import type { JobActions } from "../hooks/useJobActions";

export function JobActionsBar({ job, controls, readOnlyWhy }: { job: Job; controls: JobActions; readOnlyWhy: string | null }) {
  const { busy, evaluatorLive } = controls;
  const { actions } = job;
  const readOnly = readOnlyWhy !== null;
  const canToggleEvaluator = evaluatorLive ? actions.evaluator_stop : actions.evaluator_start;
  const suspended = actions.resume;
  return (
    <div class="actions">
      <a
        class="button"
        href={tensorBoardUrl(`/jobs/${job.id}/tensorboard/`)}
        target="_blank"
        rel="noopener"
        title="This job's TensorBoard (the server starts it; its event files are under the checkpoint dir)"
        data-testid="tensorboard-link"
      >
        TensorBoard
      </a>
      <button
        type="button"
        onClick={controls.checkpointNow}
        disabled={readOnly || !actions.checkpoint || busy.has("checkpoint")}
        title={
          readOnlyWhy ??
          (actions.checkpoint
            ? "Ask the chief to write a checkpoint now"
            : "Only while a parameter_server or mirrored job runs")
        }
        data-testid="checkpoint-now"
      >
        {busy.has("checkpoint") ? <span class="spinner" /> : null}
        Checkpoint now
      </button>
      <button
        type="button"
        onClick={controls.toggleEvaluator}
        disabled={readOnly || !canToggleEvaluator || busy.has("evaluator")}
        title={
          readOnlyWhy ??
          (canToggleEvaluator
            ? "The sidecar evaluator evaluates each new checkpoint"
            : "Only while the job is unfinished and writes checkpoints")
        }
        data-testid="evaluator-toggle"
        data-running={evaluatorLive ? "true" : "false"}
      >
        {busy.has("evaluator") ? <span class="spinner" /> : null}
        {evaluatorLive ? "Stop evaluator" : "Start evaluator"}
      </button>
      <button
        type="button"
        onClick={controls.toggleSuspend}
        disabled={readOnly || !(actions.suspend || actions.resume) || busy.has("suspend")}
        title={
          readOnlyWhy ??
          (suspended
            ? "Place the job again; it continues from the checkpoint taken when it was suspended"
            : "Checkpoint, then stop every task and free the job's GPUs until resumed")
        }
        data-testid="suspend-toggle"
        data-suspended={suspended ? "true" : "false"}
      >
        {busy.has("suspend") ? <span class="spinner" /> : null}
        {suspended ? "Resume" : "Suspend"}
      </button>
      <button
        type="button"
        class="danger"
        onClick={controls.restartJob}
        disabled={readOnly || !actions.restart || busy.has("restart")}
        title={readOnlyWhy ?? undefined}
        data-testid="restart-job"
      >
        {busy.has("restart") ? <span class="spinner" /> : null}
        Restart job
      </button>
      <button
        type="button"
        class="danger"
        onClick={controls.cancelJob}
        disabled={readOnly || !actions.cancel || busy.has("cancel")}
        title={readOnlyWhy ?? undefined}
        data-testid="cancel-job"
      >
        {busy.has("cancel") ? <span class="spinner" /> : null}
        Cancel
      </button>
    </div>
  );
}
