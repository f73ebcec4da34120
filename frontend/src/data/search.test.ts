import { describe, expect, it } from "vitest";
import { parseSearch } from "./search";

describe("the jobs search", () => {
  it("splits tag:x words from the text", () => {
    expect(parseSearch("  resnet  tag:baseline lr tag:team:vision ")).toEqual({ tag: ["baseline", "team:vision"], q: "resnet lr" });
    expect(parseSearch("tag:only")).toEqual({ tag: ["only"], q: undefined });
    expect(parseSearch("tag: alone")).toEqual({ tag: [], q: "tag: alone" });
    expect(parseSearch("")).toEqual({ tag: [], q: undefined });
  });
});
