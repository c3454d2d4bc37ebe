// Builds the dashboard into the hub's webui package, which embeds it in the kollect-hub binary
// (go:embed). Vitest reads the same file for the component tests.
import { defineConfig } from "vitest/config";

export default defineConfig({
  // esbuild compiles TSX with React's automatic runtime; no React plugin is needed for a build.
  esbuild: { jsx: "automatic" },
  build: {
    outDir: "../hub/internal/webui/dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    // The budget (300 KB gzipped JS on first load) is enforced by scripts/check-budget.mjs.
    chunkSizeWarningLimit: 1024,
  },
  server: {
    // `npm run dev` against a hub: KOLLECT_HUB=https://localhost:8443 npm run dev
    proxy: process.env.KOLLECT_HUB
      ? { "^/(kollect\\.fleet\\.v1\\.|ca\\.crt)": { target: process.env.KOLLECT_HUB, secure: false, changeOrigin: true } }
      : undefined,
  },
  test: {
    environment: "happy-dom",
    include: ["src/**/*.test.{ts,tsx}"],
    restoreMocks: true,
    setupFiles: ["src/test-setup.ts"],
  },
});
