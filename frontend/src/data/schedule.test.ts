import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { coalesce, debounce } from "./schedule";

describe("coalesce", () => {
  it("runs the callback once per animation frame however many changes come in", () => {
    const frames: (() => void)[] = [];
    const redraw = vi.fn();
    const request = coalesce(redraw, (cb) => frames.push(cb));
    for (let i = 0; i < 1_000; i++) request();
    expect(frames).toHaveLength(1);
    expect(redraw).not.toHaveBeenCalled();
    frames.shift()?.();
    expect(redraw).toHaveBeenCalledTimes(1);
    request();
    request();
    expect(frames).toHaveLength(1);
    frames.shift()?.();
    expect(redraw).toHaveBeenCalledTimes(2);
  });
});

describe("debounce", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("calls once after a burst, and still calls under a steady trickle", () => {
    const fn = vi.fn();
    const call = debounce(fn, 100);
    call();
    call();
    vi.advanceTimersByTime(99);
    expect(fn).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(fn).toHaveBeenCalledTimes(1);

    // A call every 50 ms for 2 s: never quiet for 100 ms, yet it runs now and then.
    for (let t = 0; t < 2_000; t += 50) {
      call();
      vi.advanceTimersByTime(50);
    }
    expect(fn.mock.calls.length).toBeGreaterThanOrEqual(3);
    call.cancel();
  });
});
