// Launches Debian's Chromium through playwright-core the way the dashboard e2e wants it:
// headless, a fresh user-data directory, no background networking, and trusting the hub's
// self-made CA for this context only (ignoreHTTPSErrors).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

export async function launch({ executablePath, colorScheme = "light" }) {
  const userDataDir = mkdtempSync(join(tmpdir(), "kollect-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    ignoreHTTPSErrors: true,
    viewport: { width: 1440, height: 900 },
    colorScheme,
    args: [
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      "--no-default-browser-check",
      "--disable-default-apps",
      "--metrics-recording-only",
      // The test runs as root in CI, where Chromium's sandbox cannot start.
      "--no-sandbox",
    ],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}
