import { describe, expect, it } from "vitest";
import { READ_ONLY } from "../api/access";
import type { Host } from "../api/types";
import {
  deadlineSeconds,
  drainConfirm,
  drainDone,
  drainLabel,
  drainState,
  HOSTS_ADMIN_ONLY,
  hostControlsReadOnly,
  hostStatusText,
  undrainDone,
} from "./hostDrain";

const host = (fields: Partial<Host>) => ({ name: "gpu-a", status: "online", draining_since: null, live_tasks: 0, ...fields }) as Host;
const since = "2026-11-29T10:00:00Z";

describe("a host's drain state, as strata hosts words it", () => {
  it("is in service until drained, draining while tasks are left, then drained", () => {
    expect(drainState(host({}))).toBe("in-service");
    expect(drainState(host({ draining_since: undefined, live_tasks: 2 }))).toBe("in-service");
    expect(drainState(host({ draining_since: since, live_tasks: 3 }))).toBe("draining");
    expect(drainState(host({ draining_since: since }))).toBe("drained");
  });

  it("says it as the CLI's status column does", () => {
    expect(drainLabel(host({ live_tasks: 4 }))).toBeNull();
    expect(hostStatusText(host({ live_tasks: 4 }))).toBe("online");
    expect(hostStatusText(host({ draining_since: since, live_tasks: 3 }))).toBe("online, draining (3 tasks left)");
    expect(hostStatusText(host({ draining_since: since, live_tasks: 1 }))).toBe("online, draining (1 task left)");
    expect(hostStatusText(host({ draining_since: since }))).toBe("online, drained");
    expect(hostStatusText(host({ status: "lost", draining_since: since }))).toBe("lost, drained");
  });
});

describe("who may drain", () => {
  it("is an admin token; a viewer or a user is told why not; unknown stays on", () => {
    expect(hostControlsReadOnly("admin")).toBeNull();
    expect(hostControlsReadOnly("unknown")).toBeNull();
    expect(hostControlsReadOnly("viewer")).toBe(READ_ONLY);
    expect(hostControlsReadOnly("user")).toBe(HOSTS_ADMIN_ONLY);
  });
});

describe("what the drain controls ask and report", () => {
  it("asks with a deadline to choose, the server's default first", () => {
    const idle = drainConfirm(host({}));
    expect(idle.title).toBe("Drain gpu-a?");
    expect(idle.body).toBe("gpu-a takes no new task until it is undrained. Nothing runs there now.");
    expect(idle.confirmLabel).toBe("Drain");
    expect(idle.choice?.initial).toBe("");
    expect(idle.choice?.options.map((o) => o.value)).toEqual(["", "10", "30", "60"]);
    expect(drainConfirm(host({ live_tasks: 1 })).body).toBe(
      "gpu-a takes no new task, and the jobs of its 1 task are checkpointed, then placed elsewhere (no restart counted).",
    );
  });

  it("sends no deadline for the default, and seconds otherwise", () => {
    expect(deadlineSeconds("")).toBeUndefined();
    expect(deadlineSeconds("nonsense")).toBeUndefined();
    expect(deadlineSeconds("600")).toBe(600);
  });

  it("reports the host as the server answered it", () => {
    expect(drainDone(host({ draining_since: since, live_tasks: 2 }))).toBe("Draining gpu-a: online, draining (2 tasks left).");
    expect(drainDone(host({ draining_since: since }))).toBe("Draining gpu-a: online, drained.");
    expect(undrainDone(host({}))).toBe("gpu-a is in service: online.");
  });
});
