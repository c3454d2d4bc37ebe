import { fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { EditorView } from "@codemirror/view";
import { useState } from "react";
import { describe, expect, it } from "vitest";
import { attachProblems, describeDoc, splitDocs } from "../lib/manifests";
import { ManifestEditor } from "./ManifestEditor";

const yaml = `kind: KollectProfile
metadata:
  name: web
  namespace: team-a
---
kind: KollectTarget
metadata:
  name: web
  namespace: team-a
spec:
  match: "true"
`;

function Harness({ message }: { message?: string }) {
  const [docs, setDocs] = useState(splitDocs(yaml));
  const problems = message ? attachProblems(message, docs.map(describeDoc)) : [];
  return <ManifestEditor docs={docs} onChange={setDocs} problems={problems} />;
}

/** The code editor labelled so, once CodeMirror has replaced the text area. */
async function editor(label: string) {
  return waitFor(() => {
    const el = screen.getByLabelText(label);
    expect(el.classList.contains("cm-content")).toBe(true);
    return el;
  });
}

/** Replaces the whole text of a code editor, as typing or pasting would. */
function type(el: HTMLElement, text: string) {
  const view = EditorView.findFromDOM(el)!;
  view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
}

function text(el: HTMLElement) {
  return EditorView.findFromDOM(el)!.state.doc.toString();
}

describe("ManifestEditor", () => {
  it("edits in a text area until the code editor is loaded, then in the code editor", async () => {
    const { container } = render(<Harness />);
    // React.lazy shows its fallback first: the import cannot have finished yet.
    expect(screen.getByLabelText("YAML of KollectProfile team-a/web").tagName).toBe("TEXTAREA");
    const code = await editor("YAML of KollectProfile team-a/web");
    expect(text(code)).toBe("kind: KollectProfile\nmetadata:\n  name: web\n  namespace: team-a");
    expect(container.querySelector("textarea")).toBeNull();
    // Line numbers, and YAML keys highlighted with a class of their own.
    const profile = code.closest(".doc") as HTMLElement;
    expect([...profile.querySelectorAll(".cm-lineNumbers .cm-gutterElement")].map((e) => e.textContent)).toContain("4");
    expect(profile.querySelector(".tok-propertyName")?.textContent).toBe("kind");
  });

  it("shows each problem under the object it names and at its line", async () => {
    render(<Harness message={"invalid bundle:\nKollectTarget team-a/web: spec.profileRef: Required value; spec.match: CEL match must return bool"} />);
    const target = (await editor("YAML of KollectTarget team-a/web")).closest(".doc") as HTMLElement;
    const profile = (await editor("YAML of KollectProfile team-a/web")).closest(".doc") as HTMLElement;
    expect(within(target).getAllByRole("alert").map((a) => a.textContent)).toEqual([
      "KollectTarget team-a/webdocument 2, line 5spec.profileRef: Required value",
      "KollectTarget team-a/webdocument 2, line 6spec.match: CEL match must return bool",
    ]);
    expect(within(profile).queryByRole("alert")).toBeNull();
    // In the code editor: underlined on lines 5 ("spec:") and 6 ("match:"), nowhere else.
    await waitFor(() => expect(target.querySelectorAll(".cm-lintRange-error")).toHaveLength(2));
    const lines = [...target.querySelectorAll(".cm-line")];
    expect(lines.map((l) => l.querySelector(".cm-lintRange-error")?.textContent ?? "")).toEqual(["", "", "", "", "spec:", 'match: "true"']);
    expect(profile.querySelector(".cm-lintRange")).toBeNull();
  });

  it("names a document the hub could only number, and marks the line of its YAML error", async () => {
    render(<Harness message={"invalid bundle:\ndocument 2: yaml: line 3: mapping values are not allowed in this context"} />);
    const target = (await editor("YAML of KollectTarget team-a/web")).closest(".doc") as HTMLElement;
    expect(within(target).getByRole("alert").textContent).toBe(
      "KollectTarget team-a/webdocument 2, line 3yaml: line 3: mapping values are not allowed in this context",
    );
    await waitFor(() => expect(target.querySelector(".cm-lintRange-error")?.textContent).toBe("name: web"));
  });

  it("splits a pasted multi-document text when the editor loses focus", async () => {
    render(<Harness />);
    const code = await editor("YAML of KollectProfile team-a/web");
    type(code, "kind: KollectProfile\nmetadata:\n  name: a\n---\nkind: KollectScope\nmetadata:\n  name: b\n");
    fireEvent.blur(code);
    expect(text(await editor("YAML of KollectProfile a"))).toBe("kind: KollectProfile\nmetadata:\n  name: a");
    expect(text(await editor("YAML of KollectScope b"))).toBe("kind: KollectScope\nmetadata:\n  name: b");
    expect(screen.getAllByRole("textbox")).toHaveLength(3);
  });

  it("splits after a press that took the focus, not during it", async () => {
    render(<Harness />);
    const code = await editor("YAML of KollectProfile team-a/web");
    type(code, "kind: KollectProfile\nmetadata: {name: a}\n---\nkind: KollectScope\nmetadata:\n  name: b\n");
    fireEvent.pointerDown(window);
    fireEvent.blur(code);
    // Still one editor while the pointer is down: the button under it stays where it was.
    expect(screen.getAllByRole("textbox")).toHaveLength(2);
    fireEvent.pointerUp(window);
    await editor("YAML of KollectScope b");
    expect(screen.getAllByRole("textbox")).toHaveLength(3);
    expect(screen.getByLabelText("YAML of KollectProfile a")).toBeTruthy();
  });

  it("adds and removes objects", async () => {
    render(<Harness />);
    await editor("YAML of KollectProfile team-a/web");
    fireEvent.click(screen.getByRole("button", { name: "Add an object" }));
    expect(screen.getAllByRole("textbox")).toHaveLength(3);
    fireEvent.click(screen.getByRole("button", { name: "Remove KollectProfile team-a/web" }));
    expect(screen.queryByLabelText("YAML of KollectProfile team-a/web")).toBeNull();
    expect(text(await editor("YAML of KollectTarget team-a/web"))).toContain("kind: KollectTarget");
  });
});
