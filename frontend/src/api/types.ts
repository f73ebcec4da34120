// Names for the server's schemas (generated from openapi.json into schema.d.ts) and the
// websocket frames, which OpenAPI does not describe (docs/architecture.md, "Live streams").
import type { components } from "./schema";

type Schemas = components["schemas"];

export type Job = Schemas["JobRead"];
export type JobPage = Schemas["JobPage"];
export type JobSpec = Schemas["JobSpec"];
export type JobStatus = Schemas["JobStatus"];
export type Task = Schemas["TaskRead"];
export type TaskStatus = Schemas["TaskStatus"];
export type JobEvent = Schemas["JobEventRead"];
export type Checkpoint = Schemas["CheckpointRead"];
export type CheckpointNow = Schemas["CheckpointNow"];
export type Cluster = Schemas["ClusterRead"];
export type HostUsage = Schemas["HostUsage"];
export type DeviceUsage = Schemas["DeviceUsage"];
export type TaskRef = Schemas["TaskRef"];
export type LogPage = Schemas["LogPage"];
export type MetricsRead = Schemas["MetricsRead"];

export const JOB_STATUSES: readonly JobStatus[] = [
  "pending",
  "scheduled",
  "running",
  "restarting",
  "succeeded",
  "failed",
  "cancelled",
];
export const ACTIVE_STATUSES: readonly JobStatus[] = ["pending", "scheduled", "running", "restarting"];
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

/** An event as it travels on a stream (the same fields as JobEventRead). */
export type StreamEvent = JobEvent;

export interface EventFrame {
  type: "event";
  job_id: number;
  event: StreamEvent;
  cursor: string;
}
/** Columnar series per metric name: [[steps], [values (null = NaN)], [wall times]]. */
export type Columns = [number[], (number | null)[], number[]];
export interface MetricsFrame {
  type: "metrics";
  task: string;
  attempt: number;
  last_seq: number;
  series: Record<string, Columns>;
  cursor: string;
}
export interface LogFrame {
  type: "log";
  task: string;
  attempt: number;
  first_line: number;
  lines: string[];
  cursor: string;
}
export interface CheckpointFrame {
  type: "checkpoint";
  job_id: number;
  checkpoint: Checkpoint;
  deleted: string[];
  event: StreamEvent;
  cursor: string;
}
export interface HistoryEndFrame {
  type: "history_end";
  cursor: string;
}
export type StreamFrame = EventFrame | MetricsFrame | LogFrame | CheckpointFrame | HistoryEndFrame;
