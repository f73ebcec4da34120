import { describe, expect, it } from "vitest";
import { contentType, detectFormat, locateField, withCodeBundle, withProject } from "./specText";

const YAML = `# a comment that mentions replicas: and ps:
name: digits-ps
strategy: parameter_server
replicas:
  chief: {count: 1}
  worker:
    count: 2
  ps: {count: 0, gpus: 0}
`;

describe("spec text", () => {
  it("sends JSON as JSON and everything else as YAML", () => {
    expect(detectFormat('  {"name": "x"}')).toBe("json");
    expect(detectFormat("name: x")).toBe("yaml");
    expect(contentType("yaml")).toBe("application/yaml");
    expect(contentType("json")).toBe("application/json");
  });

  it("finds the line of a nested field in block and flow YAML", () => {
    expect(locateField(YAML, "replicas.ps.count")).toBe(7);
    expect(locateField(YAML, "replicas.worker.count")).toBe(6);
    expect(locateField(YAML, "strategy")).toBe(2);
  });

  it("falls back to the deepest parent that is written", () => {
    expect(locateField(YAML, "replicas.evaluator.count")).toBe(3);
    expect(locateField(YAML, "restart.policy")).toBeNull();
  });

  it("finds fields in JSON and skips list indices", () => {
    const json = '{\n  "name": "x",\n  "entrypoint": [\n    "python", 3\n  ],\n  "replicas": {"ps": {"count": 0}}\n}';
    expect(locateField(json, "entrypoint.1")).toBe(2);
    expect(locateField(json, "replicas.ps.count")).toBe(5);
  });

  it("uses the line a parse error names", () => {
    expect(locateField(YAML, "", "the body is not valid YAML: ... line 4, column 3")).toBe(3);
  });
});

describe("a spec sent with a code bundle", () => {
  const digest = "ab".repeat(32);

  it("adds the code section to YAML, replacing one that is there", () => {
    expect(withCodeBundle("name: x\nstrategy: mirrored\n", "yaml", digest)).toBe(
      `name: x\nstrategy: mirrored\ncode:\n  sha256: "${digest}"\n`,
    );
    const withDir = "name: x\ncode:\n  dir: src\n  # comment\n\nstrategy: mirrored\ncode: {sha256: old}\n";
    expect(withCodeBundle(withDir, "yaml", digest)).toBe(
      `name: x\nstrategy: mirrored\ncode:\n  sha256: "${digest}"\n`,
    );
  });

  it("sets code in a JSON object and leaves what is not one alone", () => {
    const sent = withCodeBundle('{"name": "x", "code": {"dir": "."}}', "json", digest);
    expect(JSON.parse(sent)).toEqual({ name: "x", code: { sha256: digest } });
    expect(withCodeBundle("[1, 2]", "json", digest)).toBe("[1, 2]");
    expect(withCodeBundle("{not json", "json", digest)).toBe("{not json");
  });

  it("adds the form's project unless the spec names one", () => {
    expect(withProject("name: x\nstrategy: mirrored\n", "yaml", "vision")).toBe('name: x\nstrategy: mirrored\nproject: "vision"\n');
    expect(withProject("name: x\nproject: nlp\n", "yaml", "vision")).toBe("name: x\nproject: nlp\n");
    expect(JSON.parse(withProject('{"name": "x"}', "json", "vision"))).toEqual({ name: "x", project: "vision" });
    expect(withProject('{"name": "x", "project": "nlp"}', "json", "vision")).toBe('{"name": "x", "project": "nlp"}');
    expect(withProject("{not json", "json", "vision")).toBe("{not json");
  });
});
