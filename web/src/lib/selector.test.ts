import { describe, expect, it } from "vitest";
import { formatSelector, parseSelector, selects } from "./selector";

describe("label selectors", () => {
  it("parses every Kubernetes form and formats it back", () => {
    const sel = parseSelector("env=prod, tier in (a, b), region notin (ap,us), team!=x, gpu, !legacy");
    expect(sel.matchLabels).toEqual({ env: "prod" });
    expect(sel.matchExpressions.map((e) => [e.key, e.operator, e.values])).toEqual([
      ["tier", "In", ["a", "b"]],
      ["region", "NotIn", ["ap", "us"]],
      ["team", "NotIn", ["x"]],
      ["gpu", "Exists", []],
      ["legacy", "DoesNotExist", []],
    ]);
    expect(formatSelector(sel)).toBe("env=prod, tier in (a,b), region notin (ap,us), team!=x, gpu, !legacy");
    expect(formatSelector(parseSelector(formatSelector(sel)))).toBe(formatSelector(sel));
  });

  it("an empty text is the empty selector, which selects everything", () => {
    const sel = parseSelector("  ");
    expect(sel.matchExpressions).toEqual([]);
    expect(selects(sel, {})).toBe(true);
  });

  it("refuses what it cannot read, naming the term", () => {
    expect(() => parseSelector("env=prod, tier in a,b)")).toThrow(/tier in a/);
  });

  it("evaluates like Kubernetes", () => {
    const sel = parseSelector("env=prod, tier in (canary), !legacy");
    expect(selects(sel, { env: "prod", tier: "canary" })).toBe(true);
    expect(selects(sel, { env: "prod", tier: "canary", legacy: "" })).toBe(false);
    expect(selects(sel, { env: "prod" })).toBe(false);
    expect(selects(parseSelector("tier notin (canary)"), {})).toBe(true);
  });
});
