import { fireEvent, render, screen, within } from "@testing-library/react";
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
`;

function Harness({ message }: { message?: string }) {
  const [docs, setDocs] = useState(splitDocs(yaml));
  const problems = message ? attachProblems(message, docs.map(describeDoc)) : [];
  return <ManifestEditor docs={docs} onChange={setDocs} problems={problems} />;
}

describe("ManifestEditor", () => {
  it("shows each problem under the object it names", () => {
    render(<Harness message={"invalid bundle:\nKollectTarget team-a/web: spec.profileRef: Required value"} />);
    const target = screen.getByLabelText("YAML of KollectTarget team-a/web").closest(".doc") as HTMLElement;
    const profile = screen.getByLabelText("YAML of KollectProfile team-a/web").closest(".doc") as HTMLElement;
    expect(within(target).getByRole("alert").textContent).toBe("KollectTarget team-a/webspec.profileRef: Required value");
    expect(within(profile).queryByRole("alert")).toBeNull();
  });

  it("splits a pasted multi-document text when the area loses focus", () => {
    render(<Harness />);
    const area = screen.getByLabelText("YAML of KollectProfile team-a/web");
    fireEvent.change(area, { target: { value: "kind: KollectProfile\nmetadata:\n  name: a\n---\nkind: KollectScope\nmetadata:\n  name: b\n" } });
    fireEvent.blur(area);
    expect(screen.getAllByRole("textbox")).toHaveLength(3);
    expect(screen.getByLabelText("YAML of KollectScope b")).toBeTruthy();
  });

  it("splits after a press that took the focus, not during it", async () => {
    render(<Harness />);
    const area = screen.getByLabelText("YAML of KollectProfile team-a/web");
    fireEvent.change(area, { target: { value: "kind: KollectProfile\nmetadata: {name: a}\n---\nkind: KollectScope\nmetadata:\n  name: b\n" } });
    fireEvent.pointerDown(window);
    fireEvent.blur(area);
    // Still one area while the pointer is down: the button under it stays where it was.
    expect(screen.getAllByRole("textbox")).toHaveLength(2);
    fireEvent.pointerUp(window);
    await new Promise((r) => setTimeout(r, 5));
    expect(screen.getAllByRole("textbox")).toHaveLength(3);
    expect(screen.getByLabelText("YAML of KollectProfile a")).toBeTruthy();
  });

  it("adds and removes objects", () => {
    render(<Harness />);
    fireEvent.click(screen.getByRole("button", { name: "Add an object" }));
    expect(screen.getAllByRole("textbox")).toHaveLength(3);
    fireEvent.click(screen.getByRole("button", { name: "Remove KollectProfile team-a/web" }));
    expect(screen.queryByLabelText("YAML of KollectProfile team-a/web")).toBeNull();
  });
});
