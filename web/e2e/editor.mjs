// The bundle editor's code editors (CodeMirror) as a test drives them: find one by its label,
// read, fill and paste its text, and say where its diagnostics are. Used by dashboard.test.mjs,
// which also runs the editor's own steps (editorTests) at their place in its sequence.
import assert from "node:assert/strict";
import { test } from "node:test";

/** The code editor (not the text area shown while CodeMirror loads) with this accessible name. */
export function codeEditor(page, title) {
  return page.locator(".cm-content").and(page.getByLabel(`YAML of ${title}`, { exact: true }));
}

/** The text of a code editor, line by line as it shows it. */
export async function codeText(editor) {
  return editor.evaluate((el) => [...el.querySelectorAll(".cm-line")].map((l) => l.textContent).join("\n"));
}

/** Replaces the text of a code editor with a paste, as a person pasting a file would. */
export async function pasteInto(editor, text) {
  await editor.click();
  await editor.press("ControlOrMeta+a");
  await editor.evaluate((el, t) => {
    const data = new DataTransfer();
    data.setData("text/plain", t);
    el.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
  }, text);
}

/**
 * Where the diagnostics of one document's editor are: the line numbers beside the gutter's
 * error markers, and the lines with an underlined range, both in document order.
 */
export async function diagnosticLines(doc) {
  return doc.evaluate((el) => {
    const top = (e) => Math.round(e.getBoundingClientRect().top);
    const shown = (g) => g.style.visibility !== "hidden"; // CodeMirror's width spacer
    const numbers = new Map([...el.querySelectorAll(".cm-lineNumbers .cm-gutterElement")].filter(shown).map((g) => [top(g), Number(g.textContent)]));
    const markers = [...el.querySelectorAll(".cm-gutter-lint .cm-gutterElement")]
      .filter((g) => shown(g) && g.querySelector(".cm-lint-marker-error"))
      .map((g) => numbers.get(top(g)));
    const ranges = [...el.querySelectorAll(".cm-line")].flatMap((l, i) => (l.querySelector(".cm-lintRange-error") ? [i + 1] : []));
    return { markers, ranges };
  });
}

// One paste, four documents, a problem in each: an unknown field and a CEL error in the
// profile (lines 6 and 12), two kinds that may not be distributed (ConfigMap and Secret, at
// their apiVersion), and a YAML error in the target (line 7, its unclosed flow mapping).
const multi = `apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata: {name: multi-profile, namespace: team-a}
spec:
  target: {group: apps, version: v1, kind: Deployment}
  colour: blue
  attributes:
    - name: replicas
      jsonPath: "{.spec.replicas}"
      type: int
    - name: images
      cel: "object.spec.template.spec.containers.map(c, c.image"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: team-a
data:
  colour: blue
---
apiVersion: kollect.dev/v1alpha1
kind: KollectTarget
metadata:
  name: multi-target
  namespace: team-a
spec:
  profileRef: {name: multi-profile
  match: "true"
---
# may not be distributed either
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: team-a}
stringData: {token: x}
`;

/** The editor's steps; ctx gives the shared page and dashboard.test.mjs's helpers. */
export function editorTests(ctx) {
  test("the bundle editor highlights YAML, numbers lines and shows every document's problems at their lines", async () => {
    const page = ctx.page();
    await ctx.go("/bundles/new");
    await page.locator("#bname").fill("multi");
    await page.locator("#bsel").fill("env=nowhere");
    await pasteInto(codeEditor(page, "document 1"), multi);
    await page.getByRole("button", { name: "Validate (dry run)" }).click();
    await page.getByRole("status").filter({ hasText: "The hub refused the bundle: 5 problems" }).waitFor();

    const expected = [
      ["KollectProfile team-a/multi-profile", 1, [6, 12], [/spec\.colour: unknown field/, /spec\.attributes\[1\] \(images\)\.cel: CEL compile error/]],
      ["ConfigMap team-a/settings", 2, [1], [/apiVersion "v1": only kollect\.dev kinds may be distributed/]],
      ["KollectTarget team-a/multi-target", 3, [7], [/yaml: line 7: did not find expected ',' or '}'/]],
      ["Secret team-a/token", 4, [2], [/apiVersion "v1": only kollect\.dev kinds may be distributed/]],
    ];
    for (const [title, n, lines, messages] of expected) {
      const doc = page.locator(`[data-object="${title}"]`);
      // Listed under the editor, in words, with the document and the line...
      const alerts = await doc.getByRole("alert").allInnerTexts();
      assert.equal(alerts.length, lines.length, `${title}: ${alerts.join(" | ")}`);
      alerts.forEach((a, k) => {
        assert.match(a, new RegExp(`document ${n}, line ${lines[k]}`), `${title}: ${a}`);
        assert.match(a, messages[k], `${title}: ${a}`);
      });
      // ...and in the editor: a gutter marker beside line N and the line underlined.
      await doc.locator(".cm-lint-marker-error").first().waitFor();
      assert.deepEqual(await diagnosticLines(doc), { markers: lines, ranges: lines }, title);
    }

    // Line numbers, and YAML highlighted: keys have a class and a colour of their own.
    const profile = page.locator('[data-object="KollectProfile team-a/multi-profile"]');
    const numbers = await profile.locator(".cm-lineNumbers .cm-gutterElement").evaluateAll((gs) =>
      gs.filter((g) => g.style.visibility !== "hidden").map((g) => g.textContent),
    );
    assert.deepEqual(numbers, ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"]);
    const key = profile.locator(".tok-propertyName").first();
    assert.equal(await key.innerText(), "apiVersion");
    const color = (l) => l.evaluate((el) => getComputedStyle(el).color);
    assert.notEqual(await color(key), await color(codeEditor(page, "KollectProfile team-a/multi-profile")));
    assert.equal(await profile.locator(".tok-string").first().innerText(), '"{.spec.replicas}"');

    // F8 moves the cursor to the next problem: from the top of the profile to line 6.
    await codeEditor(page, "KollectProfile team-a/multi-profile").focus();
    await page.keyboard.press("ControlOrMeta+Home");
    await page.keyboard.press("F8");
    assert.equal(await profile.locator(".cm-lineNumbers .cm-activeLineGutter").innerText(), "6");
    // The editor does not trap the keyboard: Tab leaves it for the next control.
    await codeEditor(page, "ConfigMap team-a/settings").focus();
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("aria-label")), "Remove KollectTarget team-a/multi-target");

    // Fixed, the bundle validates and is applied as before.
    await page.getByRole("button", { name: "Remove ConfigMap team-a/settings" }).click();
    await page.getByRole("button", { name: "Remove Secret team-a/token" }).click();
    // The problems of the documents that remain stay with them.
    assert.deepEqual(await page.getByRole("alert").allInnerTexts().then((a) => a.map((t) => t.match(/document \d+, line \d+/)[0])), [
      "document 1, line 6",
      "document 1, line 12",
      "document 2, line 7",
    ]);
    assert.match(await page.locator('[data-object="KollectTarget team-a/multi-target"]').getByRole("alert").innerText(), /^KollectTarget team-a\/multi-target/);
    const target = codeEditor(page, "KollectTarget team-a/multi-target");
    await target.fill((await codeText(target)).replace("{name: multi-profile\n", "{name: multi-profile}\n"));
    const fixedProfile = codeEditor(page, "KollectProfile team-a/multi-profile");
    await fixedProfile.fill((await codeText(fixedProfile)).replace("  colour: blue\n", "").replace("c.image\"", 'c.image)"'));
    await page.getByRole("button", { name: "Validate (dry run)" }).click();
    await page.getByRole("status").filter({ hasText: "Valid." }).waitFor();
    assert.equal(await page.getByRole("alert").count(), 0);
    await page.getByRole("button", { name: "Apply to clusters" }).click();
    await page.getByRole("heading", { name: "Bundle multi" }).waitFor();
    await page.getByLabel("Manifests").getByText("name: multi-target").waitFor();
  });
}
