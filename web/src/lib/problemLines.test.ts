import { describe, expect, it } from "vitest";
import { parsePath, problemLine, splitProblems } from "./problemLines";

const profile = `# a comment first
apiVersion: kollect.dev/v1alpha1
kind: KollectProfile
metadata:
  name: web
  labels:
    app.kubernetes.io/name: web
spec:
  target: {version: v1, kind: Pod}
  attributes:
    - {name: replicas, jsonPath: "{.spec.replicas}"}
    - name: images
      cel: "object.spec.containers"
`;

describe("splitProblems", () => {
  it("splits where the next problem starts, not at every semicolon", () => {
    expect(splitProblems("spec.extra: unknown field; metadata.name is required; appears more than once in the bundle")).toEqual([
      "spec.extra: unknown field",
      "metadata.name is required",
      "appears more than once in the bundle",
    ]);
    expect(splitProblems('spec.match: Invalid value: "a; b": must compile; see the docs')).toEqual(['spec.match: Invalid value: "a; b": must compile; see the docs']);
  });
});

describe("parsePath", () => {
  it("reads names, indexes, keys with dots and skips an item's name", () => {
    expect(parsePath("spec.attributes[1] (images).cel")).toEqual(["spec", "attributes", 1, "cel"]);
    expect(parsePath("metadata.labels[app.kubernetes.io/name]")).toEqual(["metadata", "labels", "app.kubernetes.io/name"]);
  });
});

describe("problemLine", () => {
  it("finds the line of the deepest key the document has", () => {
    expect(problemLine(profile, "spec.attributes[1] (images).cel: CEL compile error")).toBe(13);
    expect(problemLine(profile, "spec.attributes[0].jsonPath: JSONPath parse error")).toBe(11);
    expect(problemLine(profile, "metadata.labels[app.kubernetes.io/name]: Invalid value")).toBe(7);
    // A missing field is shown at its parent.
    expect(problemLine(profile, "spec.target.group: Required value")).toBe(9);
    expect(problemLine(profile, "appears more than once in the bundle")).toBe(5);
    expect(problemLine(profile, 'unknown kind "KollectProfile" in kollect.dev')).toBe(3);
    expect(problemLine(profile, 'apiVersion "v1": only kollect.dev kinds may be distributed')).toBe(2);
  });

  it("takes the line of a YAML error from the hub, and the first line with content otherwise", () => {
    expect(problemLine(profile, "yaml: line 9: did not find expected ',' or '}'")).toBe(9);
    expect(problemLine(profile, "the hub said something else")).toBe(2);
    expect(problemLine("- a list\n", "json: cannot unmarshal array")).toBe(1);
  });
});
