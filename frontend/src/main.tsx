import { render } from "preact";
import { App } from "./App";
import { adoptTokenFromUrl } from "./api/auth";
import "./styles.css";
import { applyTheme, initialTheme } from "./ui/theme";

adoptTokenFromUrl();
applyTheme(initialTheme(), false);
if (!location.hash) history.replaceState(history.state, "", `${location.pathname}${location.search}#/jobs`);

const root = document.getElementById("app");
if (root) render(<App />, root);
