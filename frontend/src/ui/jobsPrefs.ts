// The jobs page's choices kept per tab: its status filter, and whether the user opened or
// closed the submit form. Storage may be off; then nothing is remembered.
import { asFilter, type Filter } from "../data/jobFilters";

const FILTER_KEY = "strata.jobs-filter";
const FORM_KEY = "strata.jobs-form";

export function savedFilter(): Filter {
  try {
    return asFilter(sessionStorage.getItem(FILTER_KEY));
  } catch {
    return "all";
  }
}

export function saveFilter(filter: Filter): void {
  try {
    sessionStorage.setItem(FILTER_KEY, filter);
  } catch {
    /* storage off */
  }
}

/** Whether the user opened (true) or closed (false) the form; null if they never chose. */
export function savedFormChoice(): boolean | null {
  try {
    const value = sessionStorage.getItem(FORM_KEY);
    return value === null ? null : value === "true";
  } catch {
    return null;
  }
}

export function saveFormChoice(open: boolean): void {
  try {
    sessionStorage.setItem(FORM_KEY, String(open));
  } catch {
    /* storage off */
  }
}
