// One job's live store for as long as a page shows it: started on mount, stopped on unmount,
// its stream's state shown by the connection indicator, and a refused token back to login.
import { useEffect, useMemo } from "preact/hooks";
import { signalUnauthorized } from "../api/auth";
import { JobLive } from "../data/jobLive";
import { setConnection } from "../ui/connection";
import { useSubscription } from "../ui/hooks";

export function useJobLive(id: number): JobLive {
  const live = useMemo(() => new JobLive(id), [id]);
  const subscribe = useMemo(() => live.subscribe.bind(live), [live]);
  useSubscription(subscribe);
  useEffect(() => {
    live.start();
    return () => {
      live.stop();
      setConnection(null);
    };
  }, [live]);
  useEffect(() => setConnection(live.stream), [live.stream]);
  useEffect(() => {
    if (live.fatal && /token/i.test(live.fatal)) signalUnauthorized(`The server refused the token: ${live.fatal}`);
  }, [live.fatal]);
  return live;
}
