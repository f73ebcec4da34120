/// <reference types="vitest/config" />
// The dashboard is served by the Strata server at /ui/ (backend/api/ui.py); `npm run dev`
// proxies the API and the websockets to a running server (STRATA_SERVER, default :8000).
import { defineConfig } from "vite";

const server = process.env.STRATA_SERVER ?? "http://127.0.0.1:8000";
const api = { target: server, changeOrigin: true, ws: true };

export default defineConfig({
  base: "/ui/",
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    chunkSizeWarningLimit: 200,
  },
  server: {
    proxy: {
      "^/(jobs|hosts|cluster|healthz)": api,
      "/stream": api,
    },
  },
  test: {
    include: ["src/**/*.test.ts"],
    environment: "node",
  },
});
