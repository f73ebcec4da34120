// One live stream (a job's, or the cluster's) over a websocket: subscribe with the last
// cursor, apply frames once, and reconnect by itself with exponential backoff and jitter,
// resuming where it stopped. The socket and the clock can be replaced in tests.
import type { StreamFrame, Subscribe } from "../api/types";
import { FrameFilter } from "./dedupe";

export interface SocketLike {
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}
export type SocketFactory = (url: string) => SocketLike;

export type StreamState =
  | { kind: "connecting"; attempt: number }
  | { kind: "loading" } // subscribed, history on its way
  | { kind: "live" } // history done, live frames flowing
  | { kind: "waiting"; attempt: number; retryInMs: number; reason: string }
  | { kind: "stopped"; reason: string };

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  factor: number;
}
export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 500, maxMs: 15_000, factor: 2 };

/** Delay before reconnect number `attempt` (1-based): exponential, capped, "equal jitter"
 * (half fixed, half random) so that many tabs do not come back in step. */
export function backoffDelay(attempt: number, options: BackoffOptions, random: () => number): number {
  const ceiling = Math.min(options.maxMs, options.initialMs * options.factor ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

export interface StreamOptions {
  /** The websocket URL, asked again before each connection (the token can change). */
  url: () => string;
  onFrame: (frame: StreamFrame) => void;
  onState?: (state: StreamState) => void;
  /** The server refused the token or the subscription for good (1008 that a retry cannot fix). */
  onFatal?: (reason: string, auth: boolean) => void;
  socket?: SocketFactory;
  backoff?: BackoffOptions;
  random?: () => number;
  /** Resume from here instead of the start of history. */
  cursor?: string | null;
}

// Close codes: 1008 policy (bad token, bad frame, unknown job), 1013 try again later (this
// subscriber fell behind; resume from its cursor).
const POLICY = 1008;
const TRY_AGAIN = 1013;

export class StreamClient {
  private socket: SocketLike | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private failures = 0;
  private stopped = true;
  private readonly filter = new FrameFilter();
  private readonly backoff: BackoffOptions;
  private readonly random: () => number;
  private readonly factory: SocketFactory;
  cursor: string | null;
  state: StreamState = { kind: "stopped", reason: "not started" };

  constructor(private readonly options: StreamOptions) {
    this.backoff = options.backoff ?? DEFAULT_BACKOFF;
    this.random = options.random ?? Math.random;
    this.factory = options.socket ?? ((url) => new WebSocket(url) as unknown as SocketLike);
    this.cursor = options.cursor ?? null;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    if (typeof window !== "undefined") window.addEventListener("online", this.onOnline);
    this.connect();
  }

  /** The browser is back online: do not sit out the rest of a long backoff. */
  private readonly onOnline = (): void => this.reconnectNow();

  stop(reason = "closed"): void {
    this.stopped = true;
    if (typeof window !== "undefined") window.removeEventListener("online", this.onOnline);
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const socket = this.socket;
    this.socket = null;
    if (socket) {
      socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
      try {
        socket.close(1000, reason);
      } catch {
        /* already closed */
      }
    }
    this.setState({ kind: "stopped", reason });
  }

  /** Drop the current connection and reconnect now (e.g. when the tab comes back online). */
  reconnectNow(): void {
    if (this.stopped) return;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
      this.connect();
    }
  }

  private setState(state: StreamState): void {
    this.state = state;
    this.options.onState?.(state);
  }

  private connect(): void {
    this.timer = null;
    this.setState({ kind: "connecting", attempt: this.failures });
    let socket: SocketLike;
    try {
      socket = this.factory(this.options.url());
    } catch (error) {
      this.scheduleReconnect(`cannot open the socket: ${(error as Error).message}`);
      return;
    }
    this.socket = socket;
    socket.onopen = () => {
      const subscribe: Subscribe = { type: "subscribe", cursor: this.cursor };
      socket.send(JSON.stringify(subscribe));
      this.setState({ kind: "loading" });
    };
    socket.onmessage = (event) => this.receive(event.data);
    socket.onerror = () => {
      /* a close event follows */
    };
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.closed(event.code, event.reason);
    };
  }

  private receive(data: unknown): void {
    if (typeof data !== "string") return;
    let frame: StreamFrame;
    try {
      frame = JSON.parse(data) as StreamFrame;
    } catch {
      return;
    }
    if (typeof frame.cursor === "string") this.cursor = frame.cursor;
    if (frame.type === "history_end") {
      this.failures = 0; // a healthy connection: the next drop starts the backoff over
      this.setState({ kind: "live" });
    }
    const accepted = this.filter.accept(frame);
    if (accepted) this.options.onFrame(accepted);
  }

  private closed(code: number, reason: string): void {
    if (this.stopped) return;
    if (code === POLICY) {
      if (/token/i.test(reason)) {
        this.stop(reason);
        this.options.onFatal?.(reason, true);
        return;
      }
      if (/cursor/i.test(reason)) {
        // This server does not know our cursor (its database was replaced): start over;
        // the frame filter drops what was applied already.
        this.cursor = null;
      } else if (/does not exist/i.test(reason)) {
        this.stop(reason);
        this.options.onFatal?.(reason, false);
        return;
      }
    }
    const why = code === TRY_AGAIN ? `fell behind: ${reason}` : reason || `closed (${code})`;
    this.scheduleReconnect(why);
  }

  private scheduleReconnect(reason: string): void {
    this.failures += 1;
    const delay = backoffDelay(this.failures, this.backoff, this.random);
    this.setState({ kind: "waiting", attempt: this.failures, retryInMs: delay, reason });
    this.timer = setTimeout(() => this.connect(), delay);
  }
}
