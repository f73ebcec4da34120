import { describe, expect, it } from "vitest";
import type { Job, JobPage } from "../api/types";
import { withStatusEvent } from "./jobsLive";

const job = (id: number) => ({ id, status: "running", reason: null, tasks: [] }) as unknown as Job;

describe("the jobs list between refetches", () => {
  const page = { items: [job(1), job(2)], total: 2 } as unknown as JobPage;

  it("applies a status event to its job at once", () => {
    const next = withStatusEvent(page, 2, { kind: "status", to_status: "failed", message: "worker:0 exited 1" });
    expect(next?.items.map((j) => [j.id, j.status, j.reason])).toEqual([
      [1, "running", null],
      [2, "failed", "worker:0 exited 1"],
    ]);
  });

  it("leaves the list as it was for any other event, or before it loaded", () => {
    expect(withStatusEvent(page, 2, { kind: "restart", to_status: "restarting", message: "m" })).toBe(page);
    expect(withStatusEvent(page, 2, { kind: "status", to_status: null, message: "m" })).toBe(page);
    expect(withStatusEvent(null, 2, { kind: "status", to_status: "failed", message: "m" })).toBeNull();
  });
});
