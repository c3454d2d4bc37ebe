import { describe, expect, it } from "vitest";
import { coverageHealth } from "./coverage";

describe("coverageHealth", () => {
  it("is good only for complete", () => {
    expect(coverageHealth("complete")).toBe("good");
    expect(coverageHealth("syncing")).toBe("unknown");
    expect(coverageHealth("retired")).toBe("unknown");
    for (const s of ["forbidden", "kindNotServed", "deniedByScope", "failed", "somethingNew"]) expect(coverageHealth(s)).toBe("bad");
  });
});
