// The jobs list for a filter, search and project: read now, kept live from the cluster stream
// (statuses change at once, events trigger a refetch) and read again now and then (every few
// seconds while a job runs, for its progress).
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, api, websocketUrl } from "../api/client";
import { signalUnauthorized } from "../api/auth";
import type { JobPage } from "../api/types";
import { filterStatuses, type Filter } from "../data/jobFilters";
import { withStatusEvent } from "../data/jobsLive";
import { parseSearch } from "../data/search";
import { debounce } from "../data/schedule";
import { StreamClient } from "../stream/client";
import { setConnection } from "../ui/connection";

const PAGE_SIZE = 100;
// Progress (steps, rate, ETA) changes without events: read again this often while a job runs.
const PROGRESS_MS = 5_000;

export interface JobsList {
  page: JobPage | null;
  error: ApiError | null;
  load: () => Promise<void>;
}

export function useJobsList(filter: Filter, search: string, project: string): JobsList {
  const [page, setPage] = useState<JobPage | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const request = useRef(0);
  const statuses = filterStatuses(filter);

  const load = useCallback(async () => {
    // Only the newest request's answer counts: an older one may arrive after it.
    const mine = ++request.current;
    try {
      const { tag, q } = parseSearch(search);
      const query = { status: statuses, limit: PAGE_SIZE, tag, q, project: project || undefined };
      const answer = await api.get("/jobs", { query });
      if (mine !== request.current) return;
      setPage(answer);
      setError(null);
    } catch (e) {
      if (mine !== request.current) return;
      setError(e instanceof ApiError ? e : new ApiError(0, null, String(e)));
    }
  }, [filter, search, project]);

  useEffect(() => {
    setPage(null);
    void load();
  }, [load]);

  // Live: the cluster stream's events change statuses at once, and trigger a refetch.
  useEffect(() => {
    const refetch = debounce(() => void load(), 400);
    const stream = new StreamClient({
      url: () => websocketUrl("/stream"),
      onFrame: (frame) => {
        if (frame.type !== "event" && frame.type !== "checkpoint") return;
        setPage((current) => withStatusEvent(current, frame.job_id, frame.event));
        refetch();
      },
      onState: (state) => {
        setConnection(state);
        if (state.kind === "live") refetch();
      },
      onFatal: (reason, auth) => auth && signalUnauthorized(`The server refused the token: ${reason}`),
    });
    stream.start();
    // A safety net for anything the events do not cover (ages tick locally).
    const timer = setInterval(() => void load(), 30_000);
    return () => {
      refetch.cancel();
      stream.stop();
      clearInterval(timer);
      setConnection(null);
    };
  }, [load]);

  const running = page?.items.some((job) => job.status === "running") ?? false;
  useEffect(() => {
    if (!running) return;
    const timer = setInterval(() => void load(), PROGRESS_MS);
    return () => clearInterval(timer);
  }, [running, load]);

  return { page, error, load };
}
