// Log lines per task attempt, as the job stream delivers them, bounded per task.
import type { LogFrame } from "../api/types";

export const DEFAULT_MAX_LINES = 5_000;

export class LogBuffer {
  /** The text of each line held, and its number in the log (-1 for a dashboard note). */
  readonly lines: string[] = [];
  readonly numbers: number[] = [];
  /** Number of the next line expected. */
  end = 0;
  version = 0;

  constructor(
    readonly task: string,
    readonly attempt: number,
    private readonly maxLines = DEFAULT_MAX_LINES,
  ) {}

  /** Lines from `first` on. Lines held already are skipped; a gap (history starts at the
   * newest 2,000 lines) is marked with a note. */
  append(first: number, lines: readonly string[]): void {
    if (this.lines.length === 0) this.end = first;
    else if (first > this.end) {
      this.lines.push(`[dashboard] ${first - this.end} lines not loaded here (download the log for all)`);
      this.numbers.push(-1);
    }
    for (let i = Math.max(0, this.end - first); i < lines.length; i++) {
      this.lines.push(lines[i] as string);
      this.numbers.push(first + i);
    }
    this.end = Math.max(this.end, first + lines.length);
    const over = this.lines.length - this.maxLines;
    if (over > 0) {
      this.lines.splice(0, over);
      this.numbers.splice(0, over);
    }
    this.version += 1;
  }
}

/** Logs of every task attempt of a job. */
export class LogStore {
  private readonly buffers = new Map<string, LogBuffer>();
  version = 0;

  constructor(private readonly maxLines = DEFAULT_MAX_LINES) {}

  apply(frame: Pick<LogFrame, "task" | "attempt" | "first_line" | "lines">): void {
    this.get(frame.task, frame.attempt, true).append(frame.first_line, frame.lines);
    this.version += 1;
  }

  get(task: string, attempt: number): LogBuffer | undefined;
  get(task: string, attempt: number, create: true): LogBuffer;
  get(task: string, attempt: number, create = false): LogBuffer | undefined {
    const key = `${task}#${attempt}`;
    let buffer = this.buffers.get(key);
    if (!buffer && create) {
      buffer = new LogBuffer(task, attempt, this.maxLines);
      this.buffers.set(key, buffer);
    }
    return buffer;
  }

  attempts(task: string): number[] {
    return [...this.buffers.values()]
      .filter((b) => b.task === task)
      .map((b) => b.attempt)
      .sort((a, b) => a - b);
  }
}
