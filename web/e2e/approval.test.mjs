// A registration that waits for approval, in a real browser against a real hub: started by
// TestDashboardRegistrationApproval in e2e/dashboard, which registers known-1 with a plain
// token and stranger-1 with a token that requires approval (KOLLECT_GATED_TOKEN is its id).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { launch } from "./browser.mjs";

const hub = need("KOLLECT_HUB_URL");
const adminToken = need("KOLLECT_ADMIN_TOKEN");
const chromium = need("KOLLECT_CHROMIUM");
const gatedToken = need("KOLLECT_GATED_TOKEN");

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through go test ./e2e/dashboard -run TestDashboardRegistrationApproval`);
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

function row(table, text) {
  return page.getByRole("table", { name: table }).getByRole("row").filter({ hasText: text });
}

async function go(path) {
  await page.evaluate((p) => {
    window.history.pushState(null, "", p);
    window.dispatchEvent(new PopStateEvent("popstate"));
  }, path);
}

test("the pending registration is shown apart, with its token and address, and receives nothing", async () => {
  await page.goto(hub + "/");
  await page.getByLabel("API token").fill(adminToken);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Fleet" }).waitFor();

  const pending = row("New registrations", "stranger-1");
  await pending.getByText("pending approval").waitFor();
  const text = await pending.innerText();
  assert.ok(text.includes(gatedToken), `the row does not name token ${gatedToken}: ${text}`);
  assert.match(text, /handed to the whole team/);
  assert.match(text, /127\.0\.0\.1/);
  await row("New registrations", "known-1").getByText("approved at registration").waitFor();

  // The approved cluster holds the bundle (the control); the pending one holds none and is
  // counted apart, not as config skew.
  await row("Clusters", "known-1").getByText("workloads 1").waitFor();
  await row("Clusters", "stranger-1").getByText("pending approval").waitFor();
  await row("Clusters", "stranger-1").getByText("no bundles").waitFor();
  const counts = page.getByRole("region", { name: "Fleet counts" });
  await counts.getByRole("button", { name: /^1\s*pending approval/ }).waitFor();
  await counts.getByRole("button", { name: /^0\s*config skew/ }).waitFor();
});

test("the admin approves it, and the bundle reaches it", async () => {
  await row("New registrations", "stranger-1").getByRole("button", { name: "Approve stranger-1" }).click();
  await row("New registrations", "stranger-1").getByText("approved by token:admin").waitFor();
  // The simulated agent applies what its stream now delivers and reports it.
  await row("Clusters", "stranger-1").getByText("workloads 1").waitFor({ timeout: 30000 });
  assert.equal(await row("Clusters", "stranger-1").getByText("pending approval").count(), 0);
  assert.equal(await page.getByRole("region", { name: "Fleet counts" }).getByRole("button", { name: /pending approval/ }).count(), 0);
});

test("the cluster page says how it registered and who approved it", async () => {
  await go("/clusters/stranger-1");
  const reg = page.getByRole("region", { name: /Registration/ });
  await reg.getByText(gatedToken, { exact: false }).waitFor();
  await reg.getByText("127.0.0.1").waitFor();
  await reg.getByText(/approved by token:admin/).waitFor();
  await reg.getByText("new", { exact: true }).waitFor();
});

test("a sink that does not exist is an error cell of the freshness matrix", async () => {
  await go("/freshness");
  const cell = page.getByRole("button", { name: "known-1 team-a/gone: sink not found" });
  await cell.waitFor();
  assert.equal((await cell.innerText()).trim(), "sink not found");
  assert.match(await cell.getAttribute("class"), /cls-terminal/);
  await cell.click();
  await page.getByRole("region", { name: "Export cause" }).getByTestId("cause").filter({ hasText: "sink not found" }).waitFor();
});

test("no script error happened in the page", () => {
  assert.deepEqual(pageErrors.map(String), []);
});
