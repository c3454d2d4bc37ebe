import { describe, expect, it } from "vitest";
import { attachProblems, describeDoc, docTitle, joinDocs, splitDocs } from "./manifests";

const bundle = `# comment before the first object
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata:
  name: web
  namespace: team-a
  labels:
    name: not-this-one
spec:
  attributes: []
---
apiVersion: kollect.dev/v1alpha1
kind: KollectClusterTarget
metadata:
  name: "nodes" # quoted, with a comment
--- # a separator with a comment
kind: KollectInventory
metadata: {}
`;

describe("splitDocs and joinDocs", () => {
  it("splits on separator lines and joins back with one separator each", () => {
    const docs = splitDocs(bundle);
    expect(docs).toHaveLength(3);
    expect(docs[1]).toContain("KollectClusterTarget");
    const again = splitDocs(joinDocs(docs));
    expect(again).toEqual(docs);
  });

  it("drops empty documents but always leaves one to edit", () => {
    expect(splitDocs("---\n---\n")).toEqual([""]);
    expect(splitDocs("---\nkind: A\n")).toEqual(["kind: A"]);
  });
});

describe("describeDoc", () => {
  it("reads kind and metadata name and namespace, not nested names", () => {
    const [profile, target] = splitDocs(bundle).map(describeDoc);
    expect(profile).toMatchObject({ kind: "KollectProfile", name: "web", namespace: "team-a" });
    expect(target).toMatchObject({ kind: "KollectClusterTarget", name: "nodes", namespace: "" });
    expect(docTitle(profile, 0)).toBe("KollectProfile team-a/web");
    expect(docTitle(describeDoc("foo: bar"), 4)).toBe("document 5");
  });

  it("reads metadata written in flow style", () => {
    const d = describeDoc("apiVersion: kollect.dev/v1alpha1\nkind: KollectProfile\nmetadata: {name: flow, namespace: team-a}\nspec: {}\n");
    expect(docTitle(d, 0)).toBe("KollectProfile team-a/flow");
    expect(docTitle(describeDoc('{"kind": "KollectScope", "metadata": {"name": "json"}}'), 0)).toBe("KollectScope json");
  });

  it("falls back to a line scan while the YAML does not parse", () => {
    const d = describeDoc("kind: KollectProfile\nmetadata:\n  name: web\nspec:\n  attributes: [\n");
    expect(docTitle(d, 0)).toBe("KollectProfile web");
  });
});

describe("attachProblems", () => {
  const docs = splitDocs(bundle).map(describeDoc);

  it("finds the object each line of the hub's message names", () => {
    const problems = attachProblems(
      "invalid bundle:\nKollectProfile team-a/web: spec.attributes[1] (images).cel: CEL compile error: undeclared reference\nKollectClusterTarget nodes: spec.profileRef: Required value",
      docs,
    );
    expect(problems).toEqual([
      { subject: "KollectProfile team-a/web", message: "spec.attributes[1] (images).cel: CEL compile error: undeclared reference", doc: 0 },
      { subject: "KollectClusterTarget nodes", message: "spec.profileRef: Required value", doc: 1 },
    ]);
  });

  it("matches an object whose namespace the hub filled in by kind and name", () => {
    const [p] = attachProblems("invalid bundle:\nKollectClusterTarget kollect-system/nodes: bad", docs);
    expect(p.doc).toBe(1);
  });

  it("keeps a CEL error's expression and caret lines with their problem", () => {
    const problems = attachProblems(
      "invalid bundle:\nKollectProfile team-a/web: spec.attributes[1] (images).cel: CEL compile error: ERROR: <input>:1:10: Syntax error: missing ')'\n | object.x(\n | .........^",
      docs,
    );
    expect(problems).toHaveLength(1);
    expect(problems[0].doc).toBe(0);
    expect(problems[0].message).toBe("spec.attributes[1] (images).cel: CEL compile error: ERROR: <input>:1:10: Syntax error: missing ')'\n | object.x(\n | .........^");
  });

  it("maps document numbers and keeps what it cannot place", () => {
    const problems = attachProblems("invalid bundle:\ndocument 3: metadata.name is required\nthe bundle holds no objects", docs);
    expect(problems[0]).toMatchObject({ doc: 2, message: "metadata.name is required" });
    expect(problems[1]).toMatchObject({ doc: -1, subject: "", message: "the bundle holds no objects" });
  });
});
