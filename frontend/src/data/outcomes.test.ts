import { describe, expect, it } from "vitest";
import { ApiError } from "../api/client";
import { failureText, MAX_OUTCOMES, OK_SHOWN_MS, type Outcome, shownOutcomes, withOutcome } from "./outcomes";

describe("action outcomes", () => {
  it("moves an outcome to the front as it settles, keeping when it started", () => {
    let list: Outcome[] = [];
    list = withOutcome(list, 1, "checkpoint", "pending", "…", 100);
    list = withOutcome(list, 2, "cancel", "pending", "…", 150);
    list = withOutcome(list, 1, "checkpoint", "ok", "written", 300);
    expect(list.map((o) => [o.id, o.state, o.started, o.at])).toEqual([
      [1, "ok", 100, 300],
      [2, "pending", 150, 150],
    ]);
  });

  it("replaces an action's finished outcome when it runs again, and keeps a few in all", () => {
    let list: Outcome[] = [];
    list = withOutcome(list, 1, "checkpoint", "error", "refused", 1);
    list = withOutcome(list, 2, "cancel", "pending", "…", 2);
    list = withOutcome(list, 3, "checkpoint", "pending", "…", 3);
    expect(list.map((o) => o.id)).toEqual([3, 2]);
    list = withOutcome(list, 4, "checkpoint", "pending", "…", 4);
    expect(list.map((o) => o.id)).toEqual([4, 3, 2]);
    list = withOutcome(list, 3, "checkpoint", "ok", "written", 5);
    expect(list.map((o) => o.id)).toEqual([3, 4, 2]);
    list = withOutcome(list, 4, "checkpoint", "error", "refused", 6);
    expect(list.map((o) => [o.id, o.state])).toEqual([
      [4, "error"],
      [2, "pending"],
    ]);
    for (let id = 5; id < 10; id++) list = withOutcome(list, id, `restart task${id}`, "pending", "…", id);
    expect(list.map((o) => o.id)).toEqual([9, 8, 7, 6].slice(0, MAX_OUTCOMES));
  });

  it("lets a success fade after a while, while errors and pending ones stay", () => {
    const list: Outcome[] = [
      { id: 1, action: "a", state: "ok", text: "", started: 0, at: 0 },
      { id: 2, action: "b", state: "error", text: "", started: 0, at: 0 },
      { id: 3, action: "c", state: "pending", text: "", started: 0, at: 0 },
    ];
    expect(shownOutcomes(list, OK_SHOWN_MS - 1).map((o) => o.id)).toEqual([1, 2, 3]);
    expect(shownOutcomes(list, OK_SHOWN_MS).map((o) => o.id)).toEqual([2, 3]);
  });

  it("says why the server refused, with its status", () => {
    expect(failureText(new ApiError(409, { detail: "job is finished" }, "fallback"))).toBe("job is finished (409)");
    expect(failureText(new ApiError(0, null, "network down"))).toBe("network down");
    expect(failureText(new Error("boom"))).toBe("Error: boom");
  });
});
