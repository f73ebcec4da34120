// Redraw at most once per animation frame however many frames arrive: stores call `request()`
// on every change; the callback runs once, on the next frame (not at all in a hidden tab,
// which catches up when it is shown again).
export type FrameRequester = (callback: () => void) => unknown;

export function coalesce(callback: () => void, requestFrame?: FrameRequester): () => void {
  const raf: FrameRequester =
    requestFrame ??
    (typeof requestAnimationFrame === "function"
      ? (cb) => requestAnimationFrame(cb)
      : (cb) => setTimeout(cb, 16));
  let pending = false;
  return () => {
    if (pending) return;
    pending = true;
    raf(() => {
      pending = false;
      callback();
    });
  };
}

/** Call `fn` once, `ms` after the last of a burst of calls (at most every `ms` under load). */
export function debounce(fn: () => void, ms: number): { (): void; cancel(): void } {
  let timer: ReturnType<typeof setTimeout> | null = null;
  let first = 0;
  const run = () => {
    timer = null;
    first = 0;
    fn();
  };
  const call = () => {
    const now = Date.now();
    if (!first) first = now;
    if (timer !== null) clearTimeout(timer);
    // Never postpone past 4 × ms from the first call: a steady trickle still refreshes.
    timer = setTimeout(run, now - first > ms * 4 ? 0 : ms);
  };
  call.cancel = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    first = 0;
  };
  return call;
}
