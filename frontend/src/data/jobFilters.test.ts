import { describe, expect, it } from "vitest";
import { ACTIVE_STATUSES } from "../api/types";
import { asFilter, emptyList, filterStatuses } from "./jobFilters";

describe("the jobs list's filters", () => {
  it("asks for every status, the active ones, or one", () => {
    expect(filterStatuses("all")).toEqual([]);
    expect(filterStatuses("active")).toEqual([...ACTIVE_STATUSES]);
    expect(filterStatuses("failed")).toEqual(["failed"]);
  });

  it("reads a stored choice back, falling back to all", () => {
    expect(asFilter("cancelled")).toBe("cancelled");
    expect(asFilter(null)).toBe("all");
    expect(asFilter("running")).toBe("all");
  });

  it("says why the list is empty and what to do", () => {
    expect(emptyList("all", "")).toEqual({ title: "No jobs yet", hint: "Submit one with the form, the CLI (strata submit) or POST /jobs." });
    expect(emptyList("failed", "vision")).toEqual({ title: "No failed jobs in project vision", hint: "Choose another filter to see the rest." });
  });
});
