// The dashboard with a thousand clusters: the overview and the freshness matrix load, page and
// filter. Started by TestDashboardAtScale in e2e/dashboard. The load times it prints are
// informational (the machine is shared); nothing here asserts a duration.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launch } from "./browser.mjs";

const hub = process.env.KOLLECT_HUB_URL;
const adminToken = process.env.KOLLECT_ADMIN_TOKEN;
const total = Number(process.env.KOLLECT_CLUSTERS);
if (!hub || !adminToken || !total) throw new Error("run this through go test ./e2e/dashboard -run TestDashboardAtScale");

let browser;
let page;

before(async () => {
  browser = await launch({ executablePath: process.env.KOLLECT_CHROMIUM });
  page = await browser.context.newPage();
  page.setDefaultTimeout(60000);
});

after(async () => {
  await browser?.close();
});

const clusters = () => page.getByRole("table", { name: "Clusters" });

test(`the overview shows ${total} clusters a page at a time`, async () => {
  await page.goto(hub + "/");
  await page.getByLabel("API token").fill(adminToken);
  const t0 = Date.now();
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("button", { name: new RegExp(`^${total.toLocaleString("en-US")}\\s*clusters`) }).waitFor();
  await clusters().getByRole("row").nth(50).waitFor();
  console.log(`sign-in to ${total} clusters counted and the first page drawn: ${Date.now() - t0} ms`);
  assert.equal(await clusters().getByRole("row").count(), 51);
  await page.getByText(`1–50 of ${total}`).waitFor();

  const t1 = Date.now();
  await page.getByRole("button", { name: "Last page" }).click();
  await page.getByText(`${total - 49}–${total} of ${total}`).waitFor();
  console.log(`last page: ${Date.now() - t1} ms`);

  const t2 = Date.now();
  await page.getByLabel("Filter clusters").fill("scale-0999");
  await page.getByText(`1 of ${total} clusters`).waitFor();
  console.log(`filter to one cluster: ${Date.now() - t2} ms`);
  await page.getByLabel("Filter clusters").fill("");

  // Rows come with each cluster in the list: sorting a thousand needs no call per cluster.
  const t3 = Date.now();
  await page.getByRole("button", { name: "Rows", exact: true }).click();
  await page.getByRole("button", { name: "Rows", exact: true }).click();
  await clusters().getByRole("row").nth(1).filter({ hasText: `scale-${String(total - 1).padStart(4, "0")}` }).waitFor();
  console.log(`sort by rows, descending: ${Date.now() - t3} ms`);
  await page.getByRole("button", { name: "Cluster", exact: true }).click();

  await page.getByLabel("Rows per page").selectOption("250");
  await clusters().getByRole("row").nth(250).waitFor();
});

test(`the freshness matrix pages through ${total} clusters`, async () => {
  const t0 = Date.now();
  await page.getByRole("link", { name: "Freshness" }).click();
  await page.getByRole("table", { name: "Freshness matrix" }).getByRole("row").nth(50).waitFor();
  console.log(`freshness matrix, first page: ${Date.now() - t0} ms`);
  await page.getByText(`1–50 of ${total}`).waitFor();
});
