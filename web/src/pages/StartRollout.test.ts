import { describe, expect, it } from "vitest";
import { defaultForm, toStrategy } from "./StartRollout";

describe("toStrategy", () => {
  it("maps the form onto the protocol", () => {
    const s = toStrategy({
      ...defaultForm,
      canary: "tier=canary",
      waveKind: "percent",
      waveValue: "25",
      maxConcurrency: "3",
      minHealthySeconds: "90",
      deadlineMinutes: "15",
      maxFailures: "1",
      requireApproval: true,
      skipSinkErrors: true,
      maxItemChange: "20",
    });
    expect(s.canarySelector?.matchLabels).toEqual({ tier: "canary" });
    expect(s.waveSize?.size).toEqual({ case: "percent", value: 25 });
    expect(s.maxConcurrency).toBe(3);
    expect(s.minHealthy?.seconds).toBe(90n);
    expect(s.progressDeadline?.seconds).toBe(900n);
    expect(s.maxFailures).toBe(1);
    expect(s.requireApproval).toBe(true);
    expect(s.gates).toMatchObject({ skipInventoriesReady: false, skipSinkErrors: true, maxItemCountChangePercent: 20 });
  });

  it("leaves canary and wave size unset by default", () => {
    const s = toStrategy(defaultForm);
    expect(s.canarySelector).toBeUndefined();
    expect(s.waveSize).toBeUndefined();
  });

  it("names the field that is wrong", () => {
    expect(() => toStrategy({ ...defaultForm, waveKind: "count", waveValue: "0" })).toThrow(/Wave size/);
    expect(() => toStrategy({ ...defaultForm, waveKind: "percent", waveValue: "150" })).toThrow(/at most 100/);
    expect(() => toStrategy({ ...defaultForm, maxFailures: "-1" })).toThrow(/Max failures/);
  });
});
