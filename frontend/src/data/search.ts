// The jobs list's search box: words, and `tag:x` words for tags (GET /jobs?tag=&q=).

/** A search box's text as the list's filters: `tag:x` words are tags, the rest is text. */
export function parseSearch(text: string): { tag: string[]; q: string | undefined } {
  const words = text.trim().split(/\s+/).filter(Boolean);
  const tag = words.filter((w) => w.startsWith("tag:") && w.length > 4).map((w) => w.slice(4));
  const rest = words.filter((w) => !(w.startsWith("tag:") && w.length > 4)).join(" ");
  return { tag, q: rest ? rest.slice(0, 200) : undefined };
}
