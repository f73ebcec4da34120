// Hash routes, so that every page is /ui/index.html: #/jobs, #/jobs/7, #/cluster, #/sweeps/3.
export type Route =
  | { page: "jobs" }
  | { page: "job"; id: number; task: string | null }
  | { page: "cluster" }
  | { page: "compare"; ids: number[] }
  | { page: "sweeps" }
  | { page: "sweep"; id: number }
  | { page: "missing"; hash: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, "");
  const [pathname = "", search = ""] = path.split("?");
  const parts = pathname.split("/").filter(Boolean);
  if (parts.length === 0 || (parts[0] === "jobs" && parts.length === 1)) return { page: "jobs" };
  if (parts[0] === "jobs" && parts.length === 2 && /^\d+$/.test(parts[1] as string)) {
    const task = new URLSearchParams(search).get("task");
    return { page: "job", id: Number(parts[1]), task };
  }
  if (parts[0] === "cluster" && parts.length === 1) return { page: "cluster" };
  if (parts[0] === "sweeps" && parts.length === 1) return { page: "sweeps" };
  if (parts[0] === "sweeps" && parts.length === 2 && /^\d+$/.test(parts[1] as string)) return { page: "sweep", id: Number(parts[1]) };
  if (parts[0] === "compare" && parts.length === 1) {
    const ids = (new URLSearchParams(search).get("jobs") ?? "").split(",").filter((p) => /^\d+$/.test(p)).map(Number);
    return { page: "compare", ids: [...new Set(ids)] };
  }
  return { page: "missing", hash };
}

export const href = {
  jobs: () => "#/jobs",
  job: (id: number) => `#/jobs/${id}`,
  cluster: () => "#/cluster",
  compare: (ids: number[]) => `#/compare?jobs=${ids.join(",")}`,
  sweeps: () => "#/sweeps",
  sweep: (id: number) => `#/sweeps/${id}`,
};

export function navigate(hash: string): void {
  if (location.hash !== hash) location.hash = hash;
}
