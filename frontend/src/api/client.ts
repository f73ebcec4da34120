// A small fetch client typed against the server's OpenAPI schema (schema.d.ts): the path,
// its parameters, the body and the answer all come from the generated `paths`.
import { getToken, signalUnauthorized } from "./auth";
import type { paths } from "./schema";
import type { ErrorBody, FieldIssue } from "./types";

type Method = "get" | "post" | "delete";
type Op<P extends keyof paths, M extends Method> = paths[P][M];
type Success<O> = O extends { responses: infer R }
  ? R extends { 200: { content: { "application/json": infer T } } }
    ? T
    : R extends { 201: { content: { "application/json": infer T } } }
      ? T
      : never
  : never;
type PathOf<O> = O extends { parameters: { path: infer P } } ? (P extends never ? never : P) : never;
type QueryOf<O> = O extends { parameters: { query?: infer Q } } ? Q : never;
type BodyOf<O> = O extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;
/** Paths that have this method. */
type PathsWith<M extends Method> = {
  [P in keyof paths]: paths[P][M] extends undefined | never ? never : P;
}[keyof paths];

export interface RequestOptions<O> {
  path?: PathOf<O>;
  query?: QueryOf<O>;
  body?: BodyOf<O>;
  /** A body sent as is, with its own media type (a YAML job spec). */
  raw?: { text: string; contentType: string };
  signal?: AbortSignal;
}

/** A refused request: the status and the server's `{detail, errors}`. */
export class ApiError extends Error {
  readonly status: number;
  readonly detail: string;
  readonly issues: FieldIssue[];

  constructor(status: number, body: Partial<ErrorBody> | null, fallback: string) {
    const detail = typeof body?.detail === "string" ? body.detail : fallback;
    super(detail);
    this.status = status;
    this.detail = detail;
    this.issues = Array.isArray(body?.errors) ? body.errors : [];
  }
}

export function buildUrl(template: string, path?: unknown, query?: unknown): string {
  let url = template.replace(/\{(\w+)\}/g, (_, key: string) => {
    const value = (path as Record<string, unknown> | undefined)?.[key];
    if (value === undefined) throw new Error(`missing path parameter ${key}`);
    return encodeURIComponent(String(value));
  });
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries((query ?? {}) as Record<string, unknown>)) {
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? value : [value]) params.append(key, String(item));
  }
  const search = params.toString();
  if (search) url += `?${search}`;
  return url;
}

async function request<O>(method: Method, template: string, options: RequestOptions<O>): Promise<unknown> {
  const headers: Record<string, string> = { Accept: "application/json" };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  let body: string | undefined;
  if (options.raw) {
    headers["Content-Type"] = options.raw.contentType;
    body = options.raw.text;
  } else if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  let response: Response;
  try {
    response = await fetch(buildUrl(template, options.path, options.query), {
      method: method.toUpperCase(),
      headers,
      body,
      signal: options.signal,
    });
  } catch (error) {
    if ((error as Error).name === "AbortError") throw error;
    throw new ApiError(0, null, `the server cannot be reached (${(error as Error).message})`);
  }
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    if (response.status === 401) signalUnauthorized();
    throw new ApiError(
      response.status,
      parsed as Partial<ErrorBody> | null,
      `${response.status} ${response.statusText || "error"}`,
    );
  }
  return parsed;
}

export const api = {
  get<P extends PathsWith<"get">>(path: P, options: RequestOptions<Op<P, "get">> = {}) {
    return request("get", path, options) as Promise<Success<Op<P, "get">>>;
  },
  post<P extends PathsWith<"post">>(path: P, options: RequestOptions<Op<P, "post">> = {}) {
    return request("post", path, options) as Promise<Success<Op<P, "post">>>;
  },
  delete<P extends PathsWith<"delete">>(path: P, options: RequestOptions<Op<P, "delete">> = {}) {
    return request("delete", path, options) as Promise<Success<Op<P, "delete">>>;
  },
};

/** The URL of a websocket route on this server, with the token (browsers cannot set headers). */
export function websocketUrl(path: string): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const token = getToken() ?? "";
  return `${scheme}//${location.host}${path}?token=${encodeURIComponent(token)}`;
}

/** A TensorBoard page on this server (/jobs/{id}/tensorboard/, /tensorboard/compare?jobs=), with
 * the token once: the server moves it into a cookie for that TensorBoard's own requests. */
export function tensorBoardUrl(path: string, query: Record<string, string> = {}): string {
  const params = new URLSearchParams({ ...query, token: getToken() ?? "" });
  return `${path}?${params.toString()}`;
}
