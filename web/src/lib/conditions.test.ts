import { describe, expect, it } from "vitest";
import { conditionHealth } from "./conditions";

describe("conditionHealth", () => {
  it("reads True as good for positive types and as bad for negative ones", () => {
    expect(conditionHealth("Ready", "True")).toBe("good");
    expect(conditionHealth("Ready", "False")).toBe("bad");
    expect(conditionHealth("Synced", "True")).toBe("good");
    expect(conditionHealth("Degraded", "True")).toBe("bad");
    expect(conditionHealth("Degraded", "False")).toBe("good");
    expect(conditionHealth("Stalled", "True")).toBe("bad");
  });

  it("leaves Unknown unknown", () => {
    expect(conditionHealth("Ready", "Unknown")).toBe("unknown");
    expect(conditionHealth("Degraded", "Unknown")).toBe("unknown");
  });
});
