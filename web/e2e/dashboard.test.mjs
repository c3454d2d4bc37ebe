// The dashboard in a real browser against a real hub with simulated agents. Started by the Go
// test in e2e/dashboard, which provides the environment below; the steps run in order and share
// one signed-in page, as a person would use it.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { launch } from "./browser.mjs";

const hub = need("KOLLECT_HUB_URL");
const adminToken = need("KOLLECT_ADMIN_TOKEN");
const sim = need("KOLLECT_SIM_URL");
const chromium = need("KOLLECT_CHROMIUM");
const shots = process.env.KOLLECT_SCREENSHOT_DIR;

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through go test ./e2e/dashboard`);
  return v;
}

let browser;
let page;
const pageErrors = [];

before(async () => {
  browser = await launch({ executablePath: chromium });
  page = await browser.context.newPage();
  page.setDefaultTimeout(20000);
  page.on("pageerror", (err) => pageErrors.push(err));
});

after(async () => {
  await browser?.close();
});

/** Saves a screenshot for the docs when KOLLECT_SCREENSHOTS=1. */
async function screenshot(name) {
  if (!shots) return;
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: false });
}

async function signIn(token) {
  await page.goto(hub + "/");
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
}

async function signOut() {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("API token").waitFor();
}

function row(table, text) {
  return page.getByRole("table", { name: table }).getByRole("row").filter({ hasText: text });
}

test("a wrong token is refused with a readable message", async () => {
  await signIn("kat_not-a-real-token");
  await page.getByRole("alert").filter({ hasText: "The hub did not accept your API token" }).waitFor();
  assert.match(await page.getByRole("alert").innerText(), /unknown or revoked API token/);
});

test("the admin signs in and sees every cluster with its state", async () => {
  await signIn(adminToken);
  await page.getByTestId("role").filter({ hasText: "admin" }).waitFor();
  await page.getByRole("heading", { name: "Fleet" }).waitFor();
  for (const name of ["prod-eu-1", "prod-eu-2", "prod-us-1", "prod-us-2", "prod-ap-1", "staging-1", "dev-1", "edge-7"]) {
    await row("Clusters", name).first().waitFor();
  }
  await row("Clusters", "prod-eu-1").getByText("online").waitFor();
  // Inventories and rows come from each cluster's last heartbeat.
  // rows: 1,840 + 613 in its two inventories
  await row("Clusters", "prod-eu-1").getByText("2,453").waitFor();
  // The agent that lags behind is marked as version skew.
  await row("Clusters", "prod-us-2").getByText("v0.3.2").waitFor();
  await row("Clusters", "prod-us-2").locator(".skewmark").first().waitFor();
});

test("the overview follows the fleet live, without a reload", async () => {
  const before = await page.evaluate(() => performance.getEntriesByType("navigation").length);
  const res = await fetch(`${sim}/clusters`, {
    method: "POST",
    body: JSON.stringify({ name: "late-joiner", labels: { env: "dev" } }),
  });
  assert.equal(res.status, 201, await res.text());
  await row("Clusters", "late-joiner").waitFor();
  // edge-7 stops heartbeating after three beats: it turns stale, then offline, on its own.
  await row("Clusters", "edge-7").getByText(/stale|offline/).waitFor({ timeout: 30000 });
  assert.equal(await page.evaluate(() => performance.getEntriesByType("navigation").length), before);
  await screenshot("overview");
});

test("filter and sort", async () => {
  const filter = page.getByLabel("Filter clusters");
  await filter.fill("region=us");
  await page.getByText("2 of 9 clusters").waitFor();
  await filter.fill("");
  await page.getByRole("button", { name: "Cluster", exact: true }).click(); // name, descending
  const first = page.getByRole("table", { name: "Clusters" }).getByRole("row").nth(1);
  assert.match(await first.innerText(), /^staging-1/);
  await page.getByRole("button", { name: "Cluster", exact: true }).click();
});

test("no script error happened in the page", () => {
  assert.deepEqual(pageErrors.map(String), []);
});
