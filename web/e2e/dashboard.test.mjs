// The dashboard in a real browser against a real hub with simulated agents. Started by the Go
// test in e2e/dashboard, which provides the environment below; the steps run in order and share
// one signed-in page, as a person would use it.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { launch } from "./browser.mjs";
import { codeEditor, codeText, editorTests } from "./editor.mjs";

const hub = need("KOLLECT_HUB_URL");
const adminToken = need("KOLLECT_ADMIN_TOKEN");
const sim = need("KOLLECT_SIM_URL");
const chromium = need("KOLLECT_CHROMIUM");
const fingerprint = need("KOLLECT_CA_FINGERPRINT");
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

async function go(path) {
  // In-app navigation (no reload): the live feed and session stay as they are.
  await page.evaluate((p) => {
    window.history.pushState(null, "", p);
    window.dispatchEvent(new PopStateEvent("popstate"));
  }, path);
}

async function replaceIn(title, from, to) {
  const editor = codeEditor(page, title);
  const text = await codeText(editor);
  assert.ok(text.includes(from), `${title} does not contain ${from}:\n${text}`);
  await editor.fill(text.replace(from, to));
}

/** Uploads a held revision of a bundle through the editor: edit, dry run, store. */
async function uploadRevision(bundle, title, from, to, note) {
  await go(`/bundles/${bundle}/edit`);
  await replaceIn(title, from, to);
  await page.getByLabel("Change note").fill(note);
  assert.equal(await page.getByRole("checkbox", { name: /Hold/ }).isChecked(), true, "a new revision of an existing bundle is held by default");
  await page.getByRole("button", { name: "Validate (dry run)" }).click();
  await page.getByRole("status").filter({ hasText: "Valid." }).waitFor();
  await page.getByRole("button", { name: "Store revision (held)" }).click();
  await page.getByRole("heading", { name: `Bundle ${bundle}` }).waitFor();
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
  // WhoAmI names the token and its role.
  await page.getByTestId("role").filter({ hasText: "admin" }).waitFor();
  assert.equal(await page.getByTestId("token-name").innerText(), "admin");
  await page.getByRole("heading", { name: "Fleet" }).waitFor();
  for (const name of ["prod-eu-1", "prod-eu-2", "prod-us-1", "prod-us-2", "prod-ap-1", "staging-1", "dev-1", "edge-7"]) {
    await row("Clusters", name).first().waitFor();
  }
  await row("Clusters", "prod-eu-1").getByText("online").waitFor();
  // Inventories, rows and last export come with each cluster in the list (the hub sums up
  // its last heartbeat). rows: 1,840 + 613 in its two inventories
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

test("the dashboard reconnects on its own when the hub restarts", async () => {
  await page.locator(".live.live-on").waitFor();
  const restarted = fetch(`${sim}/hub/restart`, { method: "POST" });
  // The last picture stays on screen while the stream is down.
  await page.locator(".live.live-retry").filter({ hasText: /Reconnecting in \d+ s/ }).waitFor({ timeout: 15000 });
  await row("Clusters", "prod-eu-1").waitFor();
  assert.equal((await restarted).status, 204);
  await page.locator(".live.live-on").waitFor({ timeout: 40000 });
  await row("Clusters", "prod-eu-1").getByText("online").waitFor({ timeout: 30000 });
});

/** The computed background of an element: colour and image (the offline hatching). */
async function background(locator) {
  return locator.evaluate((el) => {
    const cs = getComputedStyle(el);
    return `${cs.backgroundColor} ${cs.backgroundImage}`;
  });
}

test("the freshness matrix colours every cluster × sink and opens the cause", async () => {
  await page.getByRole("link", { name: "Freshness" }).click();
  await page.getByRole("heading", { name: "Export freshness" }).waitFor();
  const cell = page.getByRole("button", { name: /^prod-us-1 team-a\/warehouse: .*terminal error/ });
  await cell.waitFor();
  assert.match(await cell.getAttribute("class"), /cls-terminal/);
  assert.match(await page.getByRole("button", { name: /^prod-ap-1 team-a\/changes: .*circuit open error/ }).getAttribute("class"), /cls-circuit-open/);
  assert.match(await page.getByRole("button", { name: /^dev-1 team-a\/inventory-git: 26 h/ }).getAttribute("class"), /age-ancient/);
  assert.match(await page.getByRole("button", { name: /^prod-eu-1 team-a\/inventory-git: \d+ s ago$/ }).getAttribute("class"), /age-fresh/);

  // Two sinks named db-good in two namespaces are two columns, each named by namespace/name.
  const matrix = page.getByRole("table", { name: "Freshness matrix" });
  for (const ns of ["shop", "sinks"]) {
    assert.equal(await matrix.getByRole("columnheader", { name: new RegExp(`^${ns}/db-good`) }).count(), 1, `one column for ${ns}/db-good`);
    await page.getByRole("button", { name: new RegExp(`^prod-eu-1 ${ns}/db-good: \\d+ s ago$`) }).waitFor();
  }
  assert.match(await matrix.getByRole("columnheader", { name: /^shop\/db-good/ }).innerText(), /database · postgres/i);
  assert.match(await matrix.getByRole("columnheader", { name: /^sinks\/db-good/ }).innerText(), /database · mongodb/i);

  // "under 1 h" and "transient error" have colours of their own, and the legend shows each.
  const aging = page.getByRole("button", { name: /^prod-us-2 team-a\/warehouse: 20 min ago$/ });
  const transient = page.getByRole("button", { name: /^staging-1 team-a\/inventory-git: .*transient error/ });
  assert.match(await aging.getAttribute("class"), /age-aging/);
  assert.match(await transient.getAttribute("class"), /cls-transient/);
  assert.notEqual(await background(aging), await background(transient), "under 1 h and transient error look alike");
  const legend = page.getByLabel("Legend");
  assert.equal(await background(legend.locator("i.age-aging")), await background(aging));
  assert.equal(await background(legend.locator("i.cls-transient")), await background(transient));
  await legend.getByText("transient error").waitFor();

  // edge-7 went offline: its cells say so and give the age it had at its last heartbeat.
  const offline = page.getByRole("button", { name: /^edge-7 team-a\/inventory-git: cluster offline; \d+ s old as of its last heartbeat .* ago$/ });
  await offline.waitFor({ timeout: 30000 });
  assert.match(await offline.getAttribute("class"), /cell-offline/);
  assert.match(await offline.innerText(), /^OFFLINE \d+ s at last heartbeat$/i);
  assert.match(await background(offline), /repeating-linear-gradient/);
  assert.equal(await background(legend.locator("i.cell-offline")), await background(offline));
  assert.match(await page.getByRole("button", { name: /^edge-7 team-a\/archive: cluster offline; never exported/ }).getAttribute("class"), /cell-offline/);
  await offline.click();
  await page.getByRole("region", { name: "Export cause" }).getByTestId("offline-note").filter({ hasText: "edge-7 is offline" }).waitFor();

  await cell.click();
  const cause = page.getByRole("region", { name: "Export cause" });
  await cause.getByTestId("cause").filter({ hasText: "password authentication failed" }).waitFor();
  await screenshot("freshness");
  await cause.getByRole("link", { name: "Open cluster prod-us-1" }).click();
  await page.getByRole("heading", { name: /prod-us-1/ }).waitFor();
});

test("the keyboard reaches everything, with a visible focus", async () => {
  // A reload keeps the session (the token is in sessionStorage) and the page (the URL).
  await page.reload();
  await page.getByRole("heading", { name: /prod-us-1/ }).waitFor();
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Skip to content");
  await page.keyboard.press("Enter");
  assert.equal(await page.evaluate(() => document.activeElement?.id), "main");
  // A freshness cell is a real button: focus it, open the cause with Enter.
  await go("/freshness");
  const cell = page.getByRole("button", { name: /^staging-1 team-a\/inventory-git: .*transient error/ });
  await cell.focus();
  assert.equal(await cell.evaluate((el) => getComputedStyle(el).outlineStyle), "solid");
  await page.keyboard.press("Enter");
  await page.getByRole("region", { name: "Export cause" }).getByTestId("cause").filter({ hasText: "context deadline exceeded" }).waitFor();
});

test("cluster detail shows inventories, sinks, applied objects and drift", async () => {
  await go("/clusters/prod-eu-2");
  await page.getByRole("table", { name: "Inventories" }).getByText("team-a/workloads").waitFor();
  await page.getByRole("table", { name: "Inventories" }).getByText("Ready=True").first().waitFor();
  // Polarity: Ready=True and Degraded=False are both good (green), whatever the status says.
  assert.match(await page.getByRole("table", { name: "Inventories" }).getByText("Ready=True").first().getAttribute("class"), /cond-good/);
  assert.match(await page.getByRole("table", { name: "Inventories" }).getByText("Degraded=False").first().getAttribute("class"), /cond-good/);
  await page.getByRole("table", { name: "Sinks" }).getByText("KollectDatabaseSink team-a/warehouse").waitFor();
  // Every sink says when the agent last called it (the heartbeat's last_attempt_time).
  for (const sink of await page.getByRole("table", { name: "Sinks" }).getByRole("row").all()) {
    const cells = await sink.getByRole("cell").allInnerTexts();
    if (!cells.length) continue; // the header row
    assert.match(cells[3], /^(just now|\d+ s ago)$/, `last attempt of ${cells[0]}: ${cells[3]}`);
  }
  await page.getByRole("list", { name: "Drift events" }).getByText(/KollectProfile deployments \(bundle workloads\): spec edited/).waitFor();
  await page.getByRole("table", { name: "Objects of workloads" }).getByText("drift reverted").waitFor();
  await page.getByRole("table", { name: "Objects of prod-config" }).getByText("applied").first().waitFor();
  // The hub's heartbeat history: the first heartbeat, then at least the one that reported the
  // configuration applied; items over time above it.
  const history = page.getByRole("table", { name: "Heartbeat history" });
  await history.getByText("first heartbeat").waitFor();
  await history.getByRole("row").nth(2).waitFor();
  await page.getByRole("img", { name: /^Items over time: 1,762 to 1,762/ }).waitFor();
  await screenshot("cluster");
  // prod-ap-1's inventory grows every few seconds. An item count alone is recorded once a
  // minute; the hub's restart above ended a silence (a record when the cluster turned stale,
  // one when it came back), and those records carry the grown count: the line rises.
  await go("/clusters/prod-ap-1");
  const growing = page.getByRole("table", { name: "Heartbeat history" });
  await growing.getByRole("row").nth(3).waitFor();
  const line = page.getByRole("img", { name: /^Items over time: 853 to [\d,]+/ });
  await line.waitFor();
  const [, last] = (await line.getAttribute("aria-label")).match(/to ([\d,]+)/);
  assert.ok(Number(last.replace(/,/g, "")) > 853, `prod-ap-1 did not grow: ${await line.getAttribute("aria-label")}`);
  await page.getByRole("heading", { name: "Heartbeat history" }).evaluate((el) => el.scrollIntoView({ block: "start" }));
  await screenshot("cluster-history");
  // staging-1's config inventory is Degraded=True: bad (red), while it stays Ready=True.
  await go("/clusters/staging-1");
  const degraded = page.getByRole("table", { name: "Inventories" }).getByText("Degraded=True");
  await degraded.waitFor();
  assert.match(await degraded.getAttribute("class"), /cond-bad/);
  assert.match(await page.getByRole("table", { name: "Inventories" }).getByText("Degraded=False").getAttribute("class"), /cond-good/);
  // Coverage per target: the forbidden target is red and says why, the complete one green
  // with its extraction errors counted.
  const invs = page.getByRole("table", { name: "Inventories" });
  const forbidden = invs.getByText("forbidden", { exact: true });
  await forbidden.waitFor();
  assert.match(await forbidden.getAttribute("class"), /cov-bad/);
  await invs.getByText("the agent may not list or watch secrets: its rows are the last known ones").waitFor();
  await invs.getByText("100 rows, 2 extraction errors").waitFor();
  assert.match(await invs.getByRole("row").filter({ hasText: "team-a/config" }).getByText("complete", { exact: true }).getAttribute("class"), /cov-good/);
  // The cluster that stopped heartbeating still has its page, with what it last reported.
  await go("/clusters/edge-7");
  await page.getByRole("heading", { name: /edge-7\s+(stale|offline)/ }).waitFor();
  await page.getByRole("table", { name: "Sinks" }).getByText("KollectSnapshotSink team-a/archive").waitFor();
});

test("a bad bundle is refused with the hub's message under the offending object", async () => {
  await go("/bundles");
  await row("Bundles", "workloads").getByRole("link", { name: "workloads" }).click();
  await page.getByRole("heading", { name: "Bundle workloads" }).waitFor();
  await page.getByLabel("Manifests").getByText("kind: KollectProfile").waitFor();
  // staging-1's agent refused one object of this bundle: the bundle's page says which and why.
  const refused = row("Objects not applied by cluster", "staging-1");
  await refused.waitFor();
  assert.deepEqual((await refused.getByRole("cell").allInnerTexts()).map((t) => t.trim()), [
    "staging-1",
    "KollectSnapshotSink inventory-repo",
    "refused",
    "refused: namespace kollect-system is outside this agent's allowed namespaces (team-b)",
  ]);
  await page.getByText("1 cluster refused or failed to apply objects of this bundle.").waitFor();
  await page.getByRole("link", { name: "Edit / upload a revision" }).click();
  await replaceIn("KollectProfile deployments", `cel: "object.spec.template.spec.containers.map(c, c.image)"`, `cel: "object.spec.template.spec.containers.map(c, c.image"`);
  await page.getByRole("button", { name: "Validate (dry run)" }).click();
  const doc = page.locator('[data-object="KollectProfile deployments"]');
  await doc.getByRole("alert").filter({ hasText: "CEL compile error" }).waitFor();
  assert.match(await doc.getByRole("alert").innerText(), /spec\.attributes\[1\] \(images\)\.cel/);
  // One CEL error, shown once: with its expression and caret under the object, nowhere else.
  assert.match(await doc.getByRole("alert").innerText(), /\| object\.spec\.template\.spec\.containers\.map\(c, c\.image\n\s*\| \.+\^/);
  assert.equal(await page.getByRole("alert").count(), 1);
  const shown = (await page.locator("#main").innerText()).split("CEL compile error").length - 1;
  assert.equal(shown, 1, "the CEL error is shown more than once");
  // Only the offending object carries the problem; nothing can be stored until a dry run passes.
  assert.equal(await page.locator('[data-object="KollectTarget deployments"]').getByRole("alert").count(), 0);
  assert.equal(await page.getByRole("button", { name: "Store revision (held)" }).isDisabled(), true);
  // The editor scrolled the problem into view (the button that asked is below the editor).
  const inView = await doc.getByRole("alert").evaluate((el) => {
    const r = el.getBoundingClientRect();
    return r.top >= 0 && r.bottom <= window.innerHeight;
  });
  assert.equal(inView, true, "the problem is not in view");
  await screenshot("bundle-editor");
});

test("a pasted text with --- is named from its YAML and validated on the first click", async () => {
  await go("/bundles/new");
  await page.locator("#bname").fill("pasted");
  await page.locator("#bsel").fill("env=nowhere");
  // Flow-style metadata, two objects in one paste.
  await codeEditor(page, "document 1").fill(`apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: pasted-profile, namespace: team-a}
spec:
  target: {group: apps, version: v1, kind: Deployment}
  attributes:
    - {name: replicas, jsonPath: "{.spec.replicas}", type: int}
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata: {name: pasted-target, namespace: team-a}
spec:
  profileRef: {name: pasted-profile}
`);
  // One click: the split that focus leaving the area causes must not swallow it.
  await page.getByRole("button", { name: "Validate (dry run)" }).click();
  await page.getByRole("status").filter({ hasText: "Valid." }).waitFor({ timeout: 10000 });
  // Then the text is two objects, each named from its inline metadata, and still validated.
  await codeEditor(page, "KollectProfile team-a/pasted-profile").waitFor();
  await codeEditor(page, "KollectTarget team-a/pasted-target").waitFor();
  assert.deepEqual(await page.locator(".doc-head > span").allInnerTexts(), ["KollectProfile team-a/pasted-profile", "KollectTarget team-a/pasted-target"]);
  assert.equal(await page.getByRole("button", { name: "Apply to clusters" }).isEnabled(), true);
  await go("/bundles"); // nothing stored
  await row("Bundles", "workloads").waitFor();
  assert.equal(await row("Bundles", "pasted").count(), 0);
});

editorTests({ page: () => page, go });

test("a bundle is previewed on clusters from the editor, applying nothing", async () => {
  await go("/bundles/workloads/edit");
  await page.getByRole("heading", { name: "Preview on clusters" }).waitFor();
  await page.getByLabel("Preview selector").fill("env=prod, region=eu");
  await page.getByRole("button", { name: "Preview on clusters" }).click();
  const results = page.getByRole("region", { name: "Preview results" });
  await results.waitFor({ timeout: 20000 });
  assert.match(await results.getByRole("status").innerText(), /: 2 answered, 0 pending, 0 not connected\./);
  // The simulated agents answer from the manifests: one target per KollectTarget, one row of
  // figures per attribute of its profile, the inventory's rows and estimated bytes.
  const clean = results.getByRole("region", { name: "Preview on prod-eu-1" });
  assert.match(await clean.getByRole("heading").innerText(), /no problems/);
  const target = clean.getByRole("table", { name: "Targets on prod-eu-1" }).getByRole("row").filter({ hasText: "deployments" });
  assert.deepEqual(
    (await target.getByRole("cell").allInnerTexts()).map((c) => c.trim()),
    ["deployments", "apps/v1 Deployment", "served", "1,840", "1,656", "1,656", "0"],
  );
  await clean.getByRole("table", { name: "Attributes of deployments" }).getByRole("row").filter({ hasText: "images" }).waitFor();
  await clean.getByRole("table", { name: "Inventories on prod-eu-1" }).getByRole("row").filter({ hasText: "355.8 KiB" }).waitFor();
  // prod-eu-2's agent fails two objects on the first attribute, and names them.
  const errors = results.getByRole("region", { name: "Preview on prod-eu-2" });
  assert.match(await errors.getByRole("heading").innerText(), /extraction errors/);
  assert.deepEqual(await errors.getByRole("list", { name: "Errors of replicas" }).getByRole("listitem").allInnerTexts(), [
    "team-a/legacy-0: replicas: no such key",
    "team-a/legacy-1: replicas: no such key",
  ]);
  await screenshot("bundle-preview");
});

test("a held revision is uploaded and diffed against the previous one", async () => {
  await uploadRevision("prod-config", "KollectInventory prod-workloads", "debounce: 5s", "debounce: 10s", "slower debounce");
  await page.getByRole("table", { name: "Revisions" }).getByText("slower debounce").waitFor();
  await page.getByText("the latest is held").waitFor();
  await page.getByRole("button", { name: "Show diff" }).click();
  const diff = page.getByLabel("Diff");
  await diff.locator(".del").filter({ hasText: "debounce: 5s" }).waitFor();
  await diff.locator(".add").filter({ hasText: "debounce: 10s" }).waitFor();
  await page.getByRole("heading", { name: "Revisions" }).evaluate((el) => el.scrollIntoView({ block: "start" }));
  await screenshot("bundles");
});

test("a rollout is previewed wave by wave, started, and watched to the end", async () => {
  await page.getByRole("link", { name: "Start rollout" }).click();
  await page.getByRole("heading", { name: "Start a rollout" }).waitFor();
  assert.equal(await page.getByLabel("Bundle").inputValue(), "prod-config");
  await page.getByLabel("Canary selector").fill("tier=canary");
  await page.getByLabel("Wave size kind").selectOption("count");
  await page.getByLabel("Wave size", { exact: true }).fill("2");
  await page.getByRole("button", { name: "Preview waves" }).click();
  const plan = page.getByRole("region", { name: "Preview" });
  await plan.getByText("prod-config 1 → 2, 5 clusters").waitFor();
  const canary = plan.getByRole("region", { name: "Wave canary" });
  assert.deepEqual(await canary.locator("li").allInnerTexts(), ["prod-eu-1"]);
  assert.equal(await plan.getByRole("region", { name: /^Wave wave/ }).count(), 2);
  await page.getByRole("button", { name: "Start rollout" }).click();
  await page.getByRole("heading", { name: /^Rollout #\d+: prod-config 1 → 2/ }).waitFor();
  await page.getByRole("region", { name: "Wave canary" }).waitFor();
  await page.getByRole("heading", { name: /completed$/ }).waitFor({ timeout: 90000 });
  for (const name of ["canary", "wave 1", "wave 2"]) {
    await page.getByRole("region", { name: `Wave ${name}` }).getByText("completed").waitFor();
  }
  assert.equal(await page.getByRole("table", { name: "Rollout clusters" }).getByText("healthy", { exact: true }).count(), 5);
  await screenshot("rollout");
  await go("/");
  await row("Clusters", "prod-us-2").getByText("prod-config 2").waitFor();
});

test("a rollout is paused, resumed and aborted", async () => {
  await uploadRevision("prod-config", "KollectInventory prod-workloads", "debounce: 10s", "debounce: 15s", "even slower");
  await page.getByRole("link", { name: "Start rollout" }).click();
  // Clusters must stay healthy for ten minutes: the rollout keeps progressing while we act.
  await page.getByLabel("Healthy for (seconds)").fill("600");
  await page.getByRole("button", { name: "Preview waves" }).click();
  await page.getByRole("region", { name: "Preview" }).getByText("prod-config 2 → 3").waitFor();
  await page.getByRole("button", { name: "Start rollout" }).click();
  await page.getByRole("heading", { name: /progressing$/ }).waitFor();
  await page.getByLabel("Reason").fill("checking the dashboards first");
  await page.getByRole("button", { name: "Pause" }).click();
  await page.getByRole("heading", { name: /paused$/ }).waitFor();
  await page.getByTestId("rollout-message").filter({ hasText: "checking the dashboards first" }).waitFor();
  await page.getByRole("button", { name: "Resume" }).click();
  await page.getByRole("heading", { name: /progressing$/ }).waitFor();
  await page.getByRole("button", { name: "Abort" }).click();
  await page.getByRole("button", { name: "Yes" }).click();
  await page.getByRole("heading", { name: /aborted$/ }).waitFor();
  await go("/rollouts");
  await page.getByRole("table", { name: "Rollout history" }).getByText("aborted").waitFor();
  await page.getByRole("table", { name: "Rollout history" }).getByText("completed").waitFor();
});

test("an admin creates a bootstrap token and gets the helm command", async () => {
  await page.getByRole("link", { name: "Agents & bootstrap" }).click();
  await page.getByLabel("Cluster name").fill("prod-eu-9");
  await page.getByLabel("Cluster labels").fill("env=prod, region=eu");
  await page.getByLabel("Time to live (hours)").fill("2");
  await page.getByRole("button", { name: "Create bootstrap token" }).click();
  const cmd = await page.getByLabel("Install command").innerText();
  assert.match(cmd, /--from-literal=token=kbt_[a-z0-9]+/);
  for (const want of ["--set clusterName=prod-eu-9", "--set clusterLabels.env=prod", "--set clusterLabels.region=eu",
    `--set hub.url=${hub}`, `--set hub.caFingerprint=${fingerprint}`, "--set hub.bootstrapToken.existingSecret=kollect-hub-bootstrap"]) {
    assert.ok(cmd.includes(want), `the command lacks ${want}:\n${cmd}`);
  }
  await page.getByRole("table", { name: "Bootstrap tokens" }).getByText("for prod-eu-9").waitFor();
});

test("an admin revokes an agent, which the hub then refuses", async () => {
  const agent = row("Agents", "dev-1");
  await agent.getByRole("button", { name: "Revoke agent" }).click();
  await agent.getByRole("button", { name: "Yes" }).click();
  await agent.getByText("revoked").first().waitFor();
  for (let i = 0; ; i++) {
    const res = await (await fetch(`${sim}/clusters/dev-1`)).json();
    if (res.stopped) {
      assert.match(res.reason, /revoked/);
      break;
    }
    assert.ok(i < 50, "the revoked agent is still running");
    await new Promise((r) => setTimeout(r, 200));
  }
});

async function createToken(name, roleLabel) {
  await go("/tokens");
  await page.getByLabel("Name").fill(name);
  await page.getByLabel("Role").selectOption({ label: roleLabel });
  await page.getByRole("button", { name: "Create API token" }).click();
  await page.getByRole("status").filter({ hasText: `Token ${name} created` }).waitFor();
  const secret = (await page.getByLabel("API token secret").innerText()).trim();
  assert.match(secret, /^kat_/);
  return secret;
}

test("an operator's token is named with its role and gets the operator's buttons", async () => {
  const secret = await createToken("deployer", "operator: also bundles, rollouts, labels");
  await row("API tokens", "deployer").getByText("operator").waitFor();
  await signOut();
  await signIn(secret);
  await page.getByTestId("role").filter({ hasText: "operator" }).waitFor();
  assert.equal(await page.getByTestId("token-name").innerText(), "deployer");
  await page.getByRole("link", { name: "Rollouts" }).click();
  await page.getByRole("link", { name: "Start rollout" }).waitFor();
  assert.equal(await page.getByRole("link", { name: "API tokens" }).count(), 0);
  await signOut();
  await signIn(adminToken);
  await page.getByTestId("role").filter({ hasText: "admin" }).waitFor();
});

test("a viewer sees everything but no button that changes anything", async () => {
  const secret = await createToken("auditor", "viewer: reads everything");
  await row("API tokens", "auditor").getByText("viewer").waitFor();
  await signOut();
  await signIn(secret);
  await page.getByTestId("role").filter({ hasText: "viewer" }).waitFor();
  const writes = /^(New bundle|Edit|Delete|Start rollout|Revoke|Pause|Resume|Abort|Roll back|Approve|Create|Store|Apply|Validate)/;
  const check = async (path, ready) => {
    await go(path);
    await ready.waitFor();
    const names = await page.getByRole("button").allInnerTexts();
    const links = await page.getByRole("link").allInnerTexts();
    assert.deepEqual([...names, ...links].filter((n) => writes.test(n.trim())), [], `write controls on ${path}`);
  };
  await check("/", row("Clusters", "prod-eu-1"));
  await check("/clusters/prod-eu-1", page.getByRole("table", { name: "Inventories" }));
  await check("/bundles", row("Bundles", "prod-config"));
  await check("/bundles/prod-config", page.getByRole("table", { name: "Revisions" }).getByText("even slower"));
  await check("/rollouts", page.getByRole("table", { name: "Rollout history" }).getByText("aborted"));
  await check("/rollouts/1", page.getByRole("heading", { name: /completed$/ }));
  assert.equal(await page.getByRole("link", { name: "Agents & bootstrap" }).count(), 0);
  assert.equal(await page.getByRole("link", { name: "API tokens" }).count(), 0);
  // The preview is allowed to viewers; starting is not offered.
  await check("/rollouts/new?bundle=prod-config", page.getByRole("button", { name: "Preview waves" }));
});

test("dark mode", async () => {
  await page.emulateMedia({ colorScheme: "dark" });
  await go("/");
  await row("Clusters", "prod-us-2").getByText("1,316").waitFor();
  await row("Clusters", "staging-1").getByText("546").waitFor();
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, "rgb(16, 19, 24)");
  await screenshot("overview-dark");
  await page.emulateMedia({ colorScheme: "light" });
});

test("no script error happened in the page", () => {
  assert.deepEqual(pageErrors.map(String), []);
});
