// The jobs list's search box: what is typed shows at once, the search it runs follows once the
// typing pauses; a clicked tag searches at once.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { debounce } from "../data/schedule";

const PAUSE_MS = 300;

export interface JobSearch {
  /** The text in the box. */
  text: string;
  /** The search the list runs. */
  search: string;
  type: (text: string) => void;
  searchFor: (text: string) => void;
}

export function useJobSearch(): JobSearch {
  const [text, setText] = useState("");
  const [search, setSearch] = useState("");
  const typed = useRef("");
  const applySearch = useMemo(() => debounce(() => setSearch(typed.current), PAUSE_MS), []);
  useEffect(() => () => applySearch.cancel(), [applySearch]);
  const type = (value: string) => {
    setText(value);
    typed.current = value;
    applySearch();
  };
  const searchFor = (value: string) => {
    applySearch.cancel();
    typed.current = value;
    setText(value);
    setSearch(value);
  };
  return { text, search, type, searchFor };
}
