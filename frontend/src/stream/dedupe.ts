// Frames a client has already applied can come again: after a reconnect that resumed from an
// older cursor, after an "invalid cursor" restart from scratch, or when history and the live
// feed overlap. The filter keeps, per job, the last event id and per task attempt the last
// metric sequence number and log line seen, and drops or trims what was applied before.
import type { StreamFrame } from "../api/types";

const attemptKey = (task: string, attempt: number): string => `${task}#${attempt}`;

export class FrameFilter {
  private lastEvent = 0;
  private readonly lastSeq = new Map<string, number>();
  private readonly nextLine = new Map<string, number>();

  /** The frame to apply (possibly trimmed), or null when everything in it was seen. */
  accept(frame: StreamFrame): StreamFrame | null {
    switch (frame.type) {
      case "event":
      case "checkpoint": {
        if (frame.event.id <= this.lastEvent) return null;
        this.lastEvent = frame.event.id;
        return frame;
      }
      case "metrics": {
        const key = attemptKey(frame.task, frame.attempt);
        if (frame.last_seq <= (this.lastSeq.get(key) ?? -1)) return null;
        this.lastSeq.set(key, frame.last_seq);
        return frame;
      }
      case "log": {
        const key = attemptKey(frame.task, frame.attempt);
        const seen = this.nextLine.get(key) ?? 0;
        const end = frame.first_line + frame.lines.length;
        if (end <= seen) return null;
        this.nextLine.set(key, end);
        const skip = seen - frame.first_line;
        if (skip > 0) return { ...frame, first_line: seen, lines: frame.lines.slice(skip) };
        return frame;
      }
      default:
        return frame;
    }
  }
}
