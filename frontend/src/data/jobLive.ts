// Everything live about one job: the job (REST, refetched when its events say it changed),
// and from its stream the events, checkpoints, metric series and logs, all bounded. Views
// subscribe and are told at most once per animation frame.
import { ApiError, api, websocketUrl } from "../api/client";
import { isFinished, type Checkpoint, type Job, type StreamEvent, type StreamFrame, type UsageFrame } from "../api/types";
import { StreamClient, type StreamOptions, type StreamState } from "../stream/client";
import { LogStore } from "./logs";
import { coalesce, debounce } from "./schedule";
import { SeriesStore } from "./series";

export const MAX_EVENTS = 1_000;
const POLL_MS = 5_000;

export class JobLive {
  job: Job | null = null;
  jobError: ApiError | null = null;
  events: StreamEvent[] = [];
  checkpoints = new Map<string, Checkpoint>();
  checkpointsLoaded = false;
  checkpointsError: string | null = null;
  readonly series = new SeriesStore();
  readonly logs = new LogStore();
  /** The last usage frame of each task (live only: none until the agents' next samples). */
  readonly usage = new Map<string, UsageFrame>();
  stream: StreamState = { kind: "connecting", attempt: 0 };
  historyDone = false;
  fatal: string | null = null;
  version = 0;

  private readonly listeners = new Set<() => void>();
  private readonly client: StreamClient;
  private readonly notify: () => void;
  private readonly refetch = debounce(() => void this.loadJob(), 300);
  private stopped = false;
  private poll: ReturnType<typeof setInterval> | null = null;

  constructor(
    readonly jobId: number,
    streamOptions: Partial<StreamOptions> = {},
  ) {
    this.notify = coalesce(() => {
      this.version += 1;
      for (const listener of this.listeners) listener();
    });
    this.client = new StreamClient({
      url: () => websocketUrl(`/jobs/${jobId}/stream`),
      onFrame: (frame) => this.apply(frame),
      onState: (state) => {
        const wasLive = this.stream.kind === "live";
        this.stream = state;
        if (state.kind === "live" && !wasLive) {
          // Back after a gap: what the REST views show may have moved on.
          if (this.historyDone) {
            void this.loadJob();
            void this.loadCheckpoints();
          }
        }
        this.notify();
      },
      onFatal: (reason) => {
        this.fatal = reason;
        this.notify();
      },
      ...streamOptions,
    });
  }

  start(): void {
    // Events say when a job changes state; a reason can change without one (a pending job's
    // placement is retried), so an unfinished job is also read again now and then.
    this.poll = setInterval(() => {
      if (this.job && !isFinished(this.job.status)) void this.loadJob();
    }, POLL_MS);
    void this.loadJob();
    void this.loadCheckpoints();
    this.client.start();
  }

  stop(): void {
    this.stopped = true;
    if (this.poll !== null) clearInterval(this.poll);
    this.refetch.cancel();
    this.client.stop();
    this.listeners.clear();
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Ask for the job again soon (after an action, or an event that changes it). */
  refresh(): void {
    this.refetch();
  }

  setJob(job: Job): void {
    this.job = job;
    this.jobError = null;
    this.notify();
  }

  async loadJob(): Promise<void> {
    try {
      const job = await api.get("/jobs/{job_id}", { path: { job_id: this.jobId } });
      if (this.stopped) return;
      this.job = job;
      this.jobError = null;
    } catch (error) {
      if (this.stopped) return;
      this.jobError = error instanceof ApiError ? error : new ApiError(0, null, String(error));
    }
    this.notify();
  }

  async loadCheckpoints(): Promise<void> {
    try {
      const rows = await api.get("/jobs/{job_id}/checkpoints", { path: { job_id: this.jobId } });
      if (this.stopped) return;
      for (const row of rows) {
        // The list may have been read before the stream said retention deleted a row.
        if (this.checkpoints.get(row.name)?.deleted_at && !row.deleted_at) continue;
        this.checkpoints.set(row.name, row);
      }
      this.checkpointsLoaded = true;
      this.checkpointsError = null;
    } catch (error) {
      this.checkpointsError = (error as Error).message;
    }
    this.notify();
  }

  apply(frame: StreamFrame): void {
    switch (frame.type) {
      case "metrics":
        this.series.apply(frame);
        break;
      case "log":
        this.logs.apply(frame);
        break;
      case "event":
        this.addEvent(frame.event);
        this.refetch();
        break;
      case "checkpoint": {
        this.addEvent(frame.event);
        this.checkpoints.set(frame.checkpoint.name, frame.checkpoint);
        for (const name of frame.deleted) {
          const gone = this.checkpoints.get(name);
          if (gone && !gone.deleted_at) this.checkpoints.set(name, { ...gone, deleted_at: frame.event.at });
        }
        this.checkpointsLoaded = true;
        break;
      }
      case "usage":
        this.usage.set(frame.task, frame);
        break;
      case "history_end":
        this.historyDone = true;
        break;
    }
    this.notify();
  }

  private addEvent(event: StreamEvent): void {
    this.events.push(event);
    if (this.events.length > MAX_EVENTS) this.events.splice(0, this.events.length - MAX_EVENTS);
  }

  /** Checkpoints newest first; those retention deleted are left out unless asked for. */
  checkpointList(includeDeleted = false): Checkpoint[] {
    return [...this.checkpoints.values()]
      .filter((c) => includeDeleted || !c.deleted_at)
      .sort((a, b) => (b.step ?? 0) - (a.step ?? 0) || b.id - a.id);
  }
}
