// Light and dark themes: remembered in localStorage, the system's preference by default.
export type Theme = "light" | "dark";
const KEY = "strata.theme";
const listeners = new Set<(theme: Theme) => void>();

export function currentTheme(): Theme {
  return document.documentElement.dataset.theme === "dark" ? "dark" : "light";
}

export function initialTheme(): Theme {
  let saved: string | null = null;
  try {
    saved = localStorage.getItem(KEY);
  } catch {
    /* storage off */
  }
  if (saved === "light" || saved === "dark") return saved;
  return window.matchMedia?.("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

export function applyTheme(theme: Theme, remember = true): void {
  document.documentElement.dataset.theme = theme;
  if (remember) {
    try {
      localStorage.setItem(KEY, theme);
    } catch {
      /* storage off */
    }
  }
  for (const listener of listeners) listener(theme);
}

export function onThemeChange(listener: (theme: Theme) => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** A CSS custom property of the current theme (charts draw on canvas, not with CSS). */
export function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}
