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
      // attributes[1] is not there: the problem is shown at "attributes:"; the target has no
      // spec at all: at its first line.
      { subject: "KollectProfile team-a/web", message: "spec.attributes[1] (images).cel: CEL compile error: undeclared reference", doc: 0, line: 10 },
      { subject: "KollectClusterTarget nodes", message: "spec.profileRef: Required value", doc: 1, line: 1 },
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
    expect(problems[0]).toMatchObject({ doc: 2, message: "metadata.name is required", line: 2 });
    expect(problems[1]).toMatchObject({ doc: -1, subject: "", message: "the bundle holds no objects", line: 0 });
  });
});

describe("attachProblems on a bundle with a problem in every document", () => {
  const pasted = `apiVersion: kollect.dev/v1alpha1
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
# a Secret may not be distributed either
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: team-a}
stringData: {token: x}
`;
  // What the hub answers for it, word for word.
  const refusal = [
    "invalid bundle:",
    "KollectProfile team-a/multi-profile: spec.colour: unknown field; spec.attributes[1] (images).cel: CEL compile error: ERROR: <input>:1:52: Syntax error: missing ')' at '<EOF>'",
    " | object.spec.template.spec.containers.map(c, c.image",
    " | ...................................................^",
    'ConfigMap team-a/settings: apiVersion "v1": only kollect.dev kinds may be distributed',
    "document 3: yaml: line 7: did not find expected ',' or '}'",
    'Secret team-a/token: apiVersion "v1": only kollect.dev kinds may be distributed',
  ].join("\n");

  it("reports every problem of every document, each with its document and line", () => {
    const problems = attachProblems(refusal, splitDocs(pasted).map(describeDoc));
    expect(problems.map(({ subject, doc, line }) => ({ subject, doc, line }))).toEqual([
      { subject: "KollectProfile team-a/multi-profile", doc: 0, line: 6 },
      { subject: "KollectProfile team-a/multi-profile", doc: 0, line: 12 },
      { subject: "ConfigMap team-a/settings", doc: 1, line: 1 },
      { subject: "document 3", doc: 2, line: 7 },
      { subject: "Secret team-a/token", doc: 3, line: 2 },
    ]);
    expect(problems[0].message).toBe("spec.colour: unknown field");
    expect(problems[1].message).toMatch(/^spec\.attributes\[1\] \(images\)\.cel: CEL compile error: .*\n \| object\.spec.*\n \| \.+\^$/);
    expect(problems[3].message).toBe("yaml: line 7: did not find expected ',' or '}'");
  });
});
