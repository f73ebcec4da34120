// Names for the server's schemas, generated from openapi.json into schema.d.ts: the REST
// answers and the websocket frames (docs/architecture.md, "Live streams").
import type { components } from "./schema";

type Schemas = components["schemas"];

export type Job = Schemas["JobRead"];
export type JobPage = Schemas["JobPage"];
export type JobSpec = Schemas["JobSpec"];
export type JobStatus = Schemas["JobStatus"];
/** Where a running job's training is (JobRead.progress): step, total, rate, ETA. */
export type JobProgress = Schemas["JobProgress"];
export type Task = Schemas["TaskRead"];
export type TaskStatus = Schemas["TaskStatus"];
export type JobEvent = Schemas["JobEventRead"];
export type Checkpoint = Schemas["CheckpointRead"];
export type CheckpointNow = Schemas["CheckpointNow"];
export type Cluster = Schemas["ClusterRead"];
/** A host as GET /hosts reads it: with its drain state (draining_since, live_tasks). */
export type Host = Schemas["HostRead"];
export type HostUsage = Schemas["HostUsage"];
export type DeviceUsage = Schemas["DeviceUsage"];
export type TaskRef = Schemas["TaskRef"];
/** What agents last sampled (every 5 s): a GPU's utilisation and memory, a task's CPU and RSS. */
export type DeviceStats = Schemas["DeviceStatsRead"];
export type TaskStats = Schemas["TaskStatsRead"];
export type LogPage = Schemas["LogPage"];
export type MetricsRead = Schemas["MetricsRead"];

export const JOB_STATUSES: readonly JobStatus[] = [
  "pending",
  "scheduled",
  "running",
  "restarting",
  "suspended",
  "succeeded",
  "failed",
  "cancelled",
];
export const ACTIVE_STATUSES: readonly JobStatus[] = ["pending", "scheduled", "running", "restarting", "suspended"];
export const isFinished = (status: JobStatus): boolean => !ACTIVE_STATUSES.includes(status);

/** Every error answer: `{detail}`, and for invalid input one issue per field (backend/errors.py). */
export interface FieldIssue {
  field: string; // dotted path into the request body, e.g. "replicas.ps.count"
  message: string;
}
export interface ErrorBody {
  detail: string;
  errors?: FieldIssue[];
}

// The stream frames (backend/streams/frames.py; in openapi.json through document_frames).
/** An event as it travels on a stream (the same fields as JobEventRead). */
export type StreamEvent = Schemas["StreamEvent"];
export type EventFrame = Schemas["EventFrame"];
export type MetricsFrame = Schemas["MetricsFrame"];
/** Columnar series per metric name: [[steps], [values (null = NaN)], [wall times]]. */
export type Columns = MetricsFrame["series"][string];
export type LogFrame = Schemas["LogFrame"];
export type CheckpointFrame = Schemas["CheckpointFrame"];
export type HistoryEndFrame = Schemas["HistoryEndFrame"];
/** Live only: a task attempt's task/* and its GPUs' host/* figures, as its agent sampled them. */
export type UsageFrame = Schemas["UsageFrame"];
export type StreamFrame = Schemas["StreamFrame"];
/** The one frame a client sends: the first, with the last cursor it saw (null: all history). */
export type Subscribe = Schemas["Subscribe"];

/** What a stored code bundle holds (GET /code/{sha256}/manifest). */
export type CodeManifest = Schemas["CodeManifest"];
