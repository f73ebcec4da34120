// Host health (name -> status) for the topology, read now and every few seconds while mounted.
import { useEffect, useState } from "preact/hooks";
import { api } from "../api/client";

const REFRESH_MS = 10_000;

export function useHostStatus(): Map<string, string> {
  const [hostStatus, setHostStatus] = useState<Map<string, string>>(new Map());
  useEffect(() => {
    let stop = false;
    const load = async () => {
      try {
        const hosts = await api.get("/hosts");
        if (!stop) setHostStatus(new Map(hosts.map((h) => [h.name, h.status])));
      } catch {
        /* the topology works without it */
      }
    };
    void load();
    const timer = setInterval(load, REFRESH_MS);
    return () => {
      stop = true;
      clearInterval(timer);
    };
  }, []);
  return hostStatus;
}
