// The job spec editor's text: which media type to send it as, and where in it a field the
// server names (e.g. "replicas.ps.count") is written, to mark that line.

export type SpecFormat = "yaml" | "json";

export function detectFormat(text: string): SpecFormat {
  const start = text.trimStart()[0];
  return start === "{" || start === "[" ? "json" : "yaml";
}

export function contentType(format: SpecFormat): string {
  return format === "json" ? "application/json" : "application/yaml";
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** The 0-based line where `field` (a dotted path; list indices are skipped) is written, or
 * the line of its deepest parent that is; null when none is. Works for YAML (block and flow
 * style) and JSON: each key is looked for after the previous one. A parse error's message
 * ("... line 4, column 3") names its line itself. */
export function locateField(text: string, field: string, message = ""): number | null {
  const lines = text.split("\n");
  if (!field) {
    const m = /line (\d+)/i.exec(message);
    if (m) {
      const line = Number(m[1]) - 1;
      return line >= 0 && line < lines.length ? line : null;
    }
    return null;
  }
  const keys = field.split(".").filter((part) => part !== "" && !/^\d+$/.test(part));
  let found: number | null = null;
  let line = 0;
  let column = 0;
  for (const key of keys) {
    const pattern = new RegExp(`(^|[\\s{,])["']?${escapeRegExp(key)}["']?\\s*:`, "g");
    let hit: { line: number; end: number } | null = null;
    for (let i = line; i < lines.length && !hit; i++) {
      const text_ = lines[i] as string;
      const code = text_.replace(/(^|\s)#.*$/, ""); // a YAML comment is not a key
      pattern.lastIndex = i === line ? column : 0;
      const m = pattern.exec(code);
      if (m) hit = { line: i, end: m.index + m[0].length };
    }
    if (!hit) break;
    found = hit.line;
    line = hit.line;
    column = hit.end;
  }
  return found;
}

/** The spec text with its `code` section set to `{sha256: digest}` (the job runs in that
 * stored bundle), for sending; any `code` section the text has is replaced. JSON is parsed
 * and written again; YAML is edited as text: a top-level `code:` key and the lines indented
 * under it are dropped, and the new section is added at the end. A text that is not a JSON
 * object or a YAML mapping is sent as it is, for the server to say what is wrong with it. */
export function withCodeBundle(text: string, format: SpecFormat, digest: string): string {
  if (format === "json") {
    try {
      const spec: unknown = JSON.parse(text);
      if (spec === null || typeof spec !== "object" || Array.isArray(spec)) return text;
      return JSON.stringify({ ...(spec as Record<string, unknown>), code: { sha256: digest } }, null, 2);
    } catch {
      return text;
    }
  }
  const kept: string[] = [];
  let inCode = false;
  for (const line of text.replace(/\s+$/, "").split("\n")) {
    if (/^code\s*:/.test(line)) {
      inCode = true;
      continue;
    }
    // Lines under `code:` are indented (or blank, or comments); the next top-level line ends it.
    if (inCode && (/^\s/.test(line) || line === "")) continue;
    inCode = false;
    kept.push(line);
  }
  return `${kept.join("\n")}\ncode:\n  sha256: ${JSON.stringify(digest)}\n`;
}

/** The spec text with `project` set, unless the text names a project itself (the spec wins
 * over the form's choice). JSON is parsed and written again; YAML gets a top-level line. */
export function withProject(text: string, format: SpecFormat, project: string): string {
  if (format === "json") {
    try {
      const spec: unknown = JSON.parse(text);
      if (spec === null || typeof spec !== "object" || Array.isArray(spec) || "project" in spec) return text;
      return JSON.stringify({ ...(spec as Record<string, unknown>), project }, null, 2);
    } catch {
      return text;
    }
  }
  if (/^project\s*:/m.test(text)) return text;
  return `${text.replace(/\s+$/, "")}\nproject: ${JSON.stringify(project)}\n`;
}
