import { describe, expect, it } from "vitest";
import type { Job } from "../api/types";
import { clientLine } from "./jobClient";

const NOW = Date.parse("2026-11-28T12:10:00Z");
const client = (attached: boolean) => ({
  session: 2,
  host: "laptop",
  pid: 4242,
  actor: "alice",
  attached,
  attached_at: "2026-11-28T12:00:00Z",
  seen_at: "2026-11-28T12:09:58Z",
  detached_at: attached ? null : "2026-11-28T12:05:00Z",
});
const job = (withClient: ReturnType<typeof client> | null) => ({ id: 1, client: withClient }) as unknown as Job;

describe("a job's client coordinator", () => {
  it("says where the attached client runs and since when", () => {
    expect(clientLine(job(client(true)), NOW)).toBe("coordinator: client 2 on laptop (pid 4242), attached 10m 0s ago");
  });

  it("says when none is attached, and which one left last", () => {
    expect(clientLine(job(null), NOW)).toBe("coordinator: no client attached yet");
    expect(clientLine(job(client(false)), NOW)).toBe("coordinator: no client attached (client 2 on laptop left 5m 0s ago)");
  });
});
