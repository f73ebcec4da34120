import { useEffect, useState } from "preact/hooks";

/** The time, refreshed every `ms` (ages and heartbeat ages tick). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(timer);
  }, [ms]);
  return now;
}

/** Re-render when a store says it changed (stores coalesce to one call per frame). */
export function useSubscription(subscribe: ((listener: () => void) => () => void) | null): void {
  const [, setTick] = useState(0);
  useEffect(() => (subscribe ? subscribe(() => setTick((n) => n + 1)) : undefined), [subscribe]);
}
