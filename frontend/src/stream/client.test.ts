import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { StreamFrame } from "../api/types";
import { backoffDelay, DEFAULT_BACKOFF, StreamClient, type SocketLike, type StreamState } from "./client";
import { FrameFilter } from "./dedupe";

/** A websocket stand-in the test drives by hand. */
class FakeSocket implements SocketLike {
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number; reason: string }) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  sent: unknown[] = [];
  closed = false;
  constructor(readonly url: string) {}
  send(data: string) {
    this.sent.push(JSON.parse(data));
  }
  close() {
    this.closed = true;
  }
  open() {
    this.onopen?.({});
  }
  frame(frame: Record<string, unknown>) {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }
  drop(code = 1006, reason = "") {
    this.onclose?.({ code, reason });
  }
}

function harness(random = () => 0.5) {
  const sockets: FakeSocket[] = [];
  const frames: StreamFrame[] = [];
  const states: StreamState[] = [];
  const fatal: [string, boolean][] = [];
  let token = "t1";
  const client = new StreamClient({
    url: () => `ws://example/jobs/7/stream?token=${token}`,
    onFrame: (f) => frames.push(f),
    onState: (s) => states.push(s),
    onFatal: (reason, auth) => fatal.push([reason, auth]),
    socket: (url) => {
      const socket = new FakeSocket(url);
      sockets.push(socket);
      return socket;
    },
    random,
  });
  return {
    client,
    sockets,
    frames,
    states,
    fatal,
    last: () => sockets[sockets.length - 1] as FakeSocket,
    setToken: (t: string) => {
      token = t;
    },
  };
}

const event = (id: number, cursor: string) => ({
  type: "event",
  job_id: 7,
  cursor,
  event: { id, at: "2026-01-01T00:00:00Z", kind: "status", task: null, from_status: "scheduled", to_status: "running", message: "m", data: {} },
});
const metrics = (task: string, attempt: number, lastSeq: number, cursor: string, step: number) => ({
  type: "metrics",
  task,
  attempt,
  last_seq: lastSeq,
  cursor,
  series: { loss: [[step], [1 / step], [0]] },
});
const log = (task: string, attempt: number, first: number, lines: string[], cursor: string) => ({
  type: "log",
  task,
  attempt,
  first_line: first,
  lines,
  cursor,
});

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("StreamClient", () => {
  it("subscribes from no cursor first, then resumes from the last cursor it saw", () => {
    const h = harness();
    h.client.start();
    h.last().open();
    expect(h.last().sent).toEqual([{ type: "subscribe", cursor: null }]);
    h.last().frame(event(1, "c1"));
    h.last().frame({ type: "history_end", cursor: "c2" });
    h.last().frame(metrics("chief:0", 0, 5, "c3", 10));
    expect(h.client.state.kind).toBe("live");
    h.last().drop(1006, "network");
    expect(h.client.state.kind).toBe("waiting");

    vi.advanceTimersByTime(10_000);
    expect(h.sockets).toHaveLength(2);
    h.last().open();
    expect(h.last().sent).toEqual([{ type: "subscribe", cursor: "c3" }]);
    expect(h.frames.map((f) => f.type)).toEqual(["event", "history_end", "metrics"]);
  });

  it("asks for the URL again on every connection (a new token is used)", () => {
    const h = harness();
    h.client.start();
    h.last().drop();
    h.setToken("t2");
    vi.advanceTimersByTime(60_000);
    expect(h.sockets.map((s) => s.url.split("token=")[1])).toEqual(["t1", "t2"]);
  });

  it("backs off exponentially up to a ceiling, and starts over once a connection was healthy", () => {
    const h = harness(() => 1); // no jitter: the full delay
    h.client.start();
    const delays: number[] = [];
    for (let i = 0; i < 8; i++) {
      h.last().drop(1006, "refused");
      const state = h.client.state;
      if (state.kind !== "waiting") throw new Error(`expected waiting, got ${state.kind}`);
      delays.push(state.retryInMs);
      // Nothing happens before the delay is up...
      vi.advanceTimersByTime(state.retryInMs - 1);
      expect(h.sockets).toHaveLength(i + 1);
      // ...and exactly one new socket after it.
      vi.advanceTimersByTime(1);
      expect(h.sockets).toHaveLength(i + 2);
    }
    expect(delays).toEqual([500, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000, 15_000]);

    h.last().open();
    h.last().frame({ type: "history_end", cursor: "c9" });
    h.last().drop(1006, "server restarted");
    const after = h.client.state;
    expect(after.kind === "waiting" && after.retryInMs).toBe(500);
  });

  it("jitters each delay between half and all of its ceiling", () => {
    expect(backoffDelay(1, DEFAULT_BACKOFF, () => 0)).toBe(250);
    expect(backoffDelay(1, DEFAULT_BACKOFF, () => 1)).toBe(500);
    expect(backoffDelay(3, DEFAULT_BACKOFF, () => 0.5)).toBe(1_500);
    expect(backoffDelay(30, DEFAULT_BACKOFF, () => 1)).toBe(DEFAULT_BACKOFF.maxMs);
  });

  it("drops frames it has applied when a resumed stream sends them again", () => {
    const h = harness();
    h.client.start();
    h.last().open();
    h.last().frame(event(1, "a"));
    h.last().frame(event(2, "b"));
    h.last().frame(metrics("chief:0", 0, 10, "c", 1));
    h.last().frame(log("chief:0", 0, 0, ["l0", "l1", "l2"], "d"));
    h.last().drop();
    vi.advanceTimersByTime(60_000);
    h.last().open();
    // The server resent some of it (history overlapping what was seen) and then new things.
    h.last().frame(event(2, "b"));
    h.last().frame(event(3, "e"));
    h.last().frame(metrics("chief:0", 0, 10, "f", 1));
    h.last().frame(metrics("chief:0", 0, 12, "g", 2));
    h.last().frame(metrics("chief:0", 1, 3, "h", 3)); // a new attempt counts from its own seq
    h.last().frame(log("chief:0", 0, 1, ["l1", "l2", "l3", "l4"], "i"));
    h.last().frame(log("chief:0", 0, 0, ["l0"], "j"));

    const events = h.frames.filter((f) => f.type === "event").map((f) => (f.type === "event" ? f.event.id : 0));
    expect(events).toEqual([1, 2, 3]);
    const seqs = h.frames.filter((f) => f.type === "metrics").map((f) => (f.type === "metrics" ? `${f.attempt}:${f.last_seq}` : ""));
    expect(seqs).toEqual(["0:10", "0:12", "1:3"]);
    const logs = h.frames.filter((f) => f.type === "log").map((f) => (f.type === "log" ? [f.first_line, f.lines] : []));
    expect(logs).toEqual([
      [0, ["l0", "l1", "l2"]],
      [3, ["l3", "l4"]],
    ]);
    // The cursor still moves on with every frame, applied or not.
    expect(h.client.cursor).toBe("j");
  });

  it("reconnects after 1013 (fell behind) with its cursor", () => {
    const h = harness();
    h.client.start();
    h.last().open();
    h.last().frame({ type: "history_end", cursor: "k1" });
    h.last().drop(1013, "subscriber too slow");
    expect(h.client.state.kind).toBe("waiting");
    vi.advanceTimersByTime(1_000);
    h.last().open();
    expect(h.last().sent).toEqual([{ type: "subscribe", cursor: "k1" }]);
  });

  it("starts over from no cursor when the server does not know the cursor", () => {
    const h = harness();
    h.client.start();
    h.last().open();
    h.last().frame(event(5, "old"));
    h.last().drop(1008, "invalid cursor: not issued by this server");
    vi.advanceTimersByTime(1_000);
    h.last().open();
    expect(h.last().sent).toEqual([{ type: "subscribe", cursor: null }]);
    h.last().frame(event(5, "new1")); // history again: already applied
    h.last().frame(event(6, "new2"));
    expect(h.frames.map((f) => (f.type === "event" ? f.event.id : -1))).toEqual([5, 6]);
  });

  it("stops for good when the token is refused, and says so", () => {
    const h = harness();
    h.client.start();
    h.last().open();
    h.last().drop(1008, "an admin token is required (header or ?token=)");
    vi.advanceTimersByTime(120_000);
    expect(h.sockets).toHaveLength(1);
    expect(h.client.state.kind).toBe("stopped");
    expect(h.fatal).toEqual([["an admin token is required (header or ?token=)", true]]);
  });

  it("does not reconnect after stop()", () => {
    const h = harness();
    h.client.start();
    h.last().open();
    const first = h.last();
    h.client.stop();
    expect(first.closed).toBe(true);
    first.drop(1000, "bye"); // handlers were detached: nothing happens
    vi.advanceTimersByTime(120_000);
    expect(h.sockets).toHaveLength(1);
  });
});

describe("FrameFilter", () => {
  it("trims a log frame that overlaps lines already applied", () => {
    const filter = new FrameFilter();
    expect(filter.accept(log("worker:1", 2, 100, ["a", "b"], "x") as StreamFrame)).not.toBeNull();
    const trimmed = filter.accept(log("worker:1", 2, 101, ["b", "c"], "y") as StreamFrame);
    expect(trimmed).toMatchObject({ first_line: 102, lines: ["c"] });
    // Another attempt of the same task is separate.
    expect(filter.accept(log("worker:1", 3, 0, ["z"], "z") as StreamFrame)).toMatchObject({ lines: ["z"] });
  });
});
