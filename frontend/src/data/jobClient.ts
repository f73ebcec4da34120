// The client coordinator of a job whose coordinator is the client, in one line for its page.
import type { Job } from "../api/types";
import { ago } from "../ui/format";

/** Who coordinates the job: where the client runs and since when, or that none is attached. */
export function clientLine(job: Job, now: number): string {
  const client = job.client;
  if (!client) return "coordinator: no client attached yet";
  if (client.attached) {
    return `coordinator: client ${client.session} on ${client.host} (pid ${client.pid}), attached ${ago(client.attached_at, now)}`;
  }
  return `coordinator: no client attached (client ${client.session} on ${client.host} left ${ago(client.detached_at, now)})`;
}
