import { describe, expect, it } from "vitest";
import { LogBuffer, LogStore } from "./logs";

describe("LogBuffer", () => {
  it("appends in order, skips lines it holds and marks a gap", () => {
    const buffer = new LogBuffer("chief:0", 0, 100);
    buffer.append(1_000, ["a", "b"]); // history starts at the newest lines
    buffer.append(1_001, ["b", "c"]);
    buffer.append(1_005, ["g"]);
    expect(buffer.lines.slice(0, 3)).toEqual(["a", "b", "c"]);
    expect(buffer.numbers).toEqual([1_000, 1_001, 1_002, -1, 1_005]);
    expect(buffer.lines[3]).toMatch(/2 lines not loaded/);
    expect(buffer.end).toBe(1_006);
  });

  it("keeps only the newest maxLines", () => {
    const buffer = new LogBuffer("worker:0", 0, 50);
    for (let i = 0; i < 1_000; i += 10) {
      buffer.append(i, Array.from({ length: 10 }, (_, k) => `line ${i + k}`));
    }
    expect(buffer.lines).toHaveLength(50);
    expect(buffer.lines[0]).toBe("line 950");
    expect(buffer.numbers[49]).toBe(999);
  });

  it("keeps attempts of a task apart", () => {
    const store = new LogStore();
    store.apply({ task: "worker:1", attempt: 0, first_line: 0, lines: ["first run"] });
    store.apply({ task: "worker:1", attempt: 1, first_line: 0, lines: ["second run"] });
    expect(store.attempts("worker:1")).toEqual([0, 1]);
    expect(store.get("worker:1", 1)?.lines).toEqual(["second run"]);
  });
});
