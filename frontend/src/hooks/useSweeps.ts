// Sweeps as the pages read them: the list (of a project), or one sweep with its trials, read
// again every 2 s while one runs and every 30 s once all ended (sweeps have no stream).
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, api } from "../api/client";
import { refreshMs, type Sweep, type SweepSummary } from "../data/sweeps";

function asApiError(e: unknown): ApiError {
  return e instanceof ApiError ? e : new ApiError(0, null, String(e));
}

/** Read with `read` now and again at `refreshMs` of what it read; the newest answer counts. */
function usePolled<T>(read: () => Promise<T>, statuses: (value: T) => Sweep["status"][], deps: unknown[]) {
  const [value, setValue] = useState<T | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const request = useRef(0);

  const load = useCallback(async () => {
    const mine = ++request.current;
    try {
      const answer = await read();
      if (mine !== request.current) return;
      setValue(answer);
      setError(null);
    } catch (e) {
      if (mine !== request.current) return;
      setError(asApiError(e));
    }
  }, deps);

  useEffect(() => {
    setValue(null);
    void load();
  }, [load]);

  const every = value === null ? 5_000 : refreshMs(statuses(value));
  useEffect(() => {
    const timer = setInterval(() => void load(), every);
    return () => clearInterval(timer);
  }, [load, every]);

  return { value, setValue, error, load };
}

export function useSweepsList(project: string) {
  const { value, error, load } = usePolled(
    () => api.get("/sweeps", { query: { project: project || undefined } }),
    (list: SweepSummary[]) => list.map((s) => s.status),
    [project],
  );
  return { sweeps: value, error, load };
}

export function useSweep(id: number) {
  const { value, setValue, error, load } = usePolled(
    () => api.get("/sweeps/{sweep_id}", { path: { sweep_id: id } }),
    (sweep: Sweep) => [sweep.status],
    [id],
  );
  return { sweep: value, setSweep: setValue, error, load };
}
