// The code bundle a job runs in: its digest, size and files, from GET /code/{sha256}/manifest
// (read by the server when the bundle was stored). A long list is folded after the first
// members; past what the server lists (10,000), the rest are only counted.
import { useEffect, useState } from "preact/hooks";
import { ApiError, api } from "../api/client";
import type { CodeManifest } from "../api/types";
import { bytes } from "../ui/format";
import { Card, ErrorState, Loading } from "./common";

/** Members shown before the list is folded. */
export const FOLDED = 12;

export function CodeBundleCard({ sha256 }: { sha256: string }) {
  const [manifest, setManifest] = useState<CodeManifest | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [open, setOpen] = useState(false);

  useEffect(() => {
    const abort = new AbortController();
    setManifest(null);
    setError(null);
    api
      .get("/code/{sha256}/manifest", { path: { sha256 }, signal: abort.signal })
      .then(setManifest)
      .catch((reason: unknown) => {
        if ((reason as Error).name === "AbortError") return;
        setError(reason instanceof ApiError ? reason.detail : String(reason));
      });
    return () => abort.abort();
  }, [sha256]);

  const listed = manifest?.listed ?? [];
  const shown = open ? listed : listed.slice(0, FOLDED);
  return (
    <Card title="Code bundle" testid="code-bundle">
      <div class="bundle-digest mono" data-testid="bundle-digest" data-sha256={sha256} title={sha256}>
        {sha256}
      </div>
      {error ? (
        <ErrorState compact title="The bundle's files cannot be shown" detail={error} />
      ) : !manifest ? (
        <Loading compact what="the bundle's files" />
      ) : (
        <>
          <div class="muted bundle-size" data-testid="bundle-size" data-bytes={manifest.size}>
            {bytes(manifest.size)} · {manifest.files} {manifest.files === 1 ? "file" : "files"} ·{" "}
            {bytes(manifest.unpacked_size)} unpacked
          </div>
          <ul class="bundle-files" data-testid="bundle-files">
            {shown.map((m) => (
              <li key={m.path} data-testid="bundle-file" data-path={m.path} data-kind={m.kind}>
                <span class="mono path">
                  {m.path}
                  {m.kind === "dir" ? "/" : ""}
                  {m.target !== null && m.target !== undefined ? (
                    <span class="faint">
                      {m.kind === "symlink" ? " → " : " ⇒ "}
                      {m.target}
                    </span>
                  ) : null}
                </span>
                <span class="faint num">{m.kind === "file" ? bytes(m.size) : m.kind === "dir" ? "" : m.kind}</span>
              </li>
            ))}
          </ul>
          {listed.length > FOLDED ? (
            <button type="button" class="small ghost" onClick={() => setOpen(!open)} aria-expanded={open} data-testid="bundle-toggle">
              {open ? "Show fewer" : `Show ${listed.length - FOLDED} more`}
            </button>
          ) : null}
          {manifest.more > 0 ? (
            <div class="faint" data-testid="bundle-more" data-count={manifest.more}>
              and {manifest.more} more (the server lists the first {listed.length})
            </div>
          ) : null}
        </>
      )}
    </Card>
  );
}
