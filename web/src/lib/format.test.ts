import { describe, expect, it } from "vitest";
import { agoMs, humanDuration, ms } from "./format";

describe("format", () => {
  it("turns durations into short words", () => {
    expect(humanDuration(999)).toBe("0 s");
    expect(humanDuration(59_000)).toBe("59 s");
    expect(humanDuration(61_000)).toBe("1 min");
    expect(humanDuration(2 * 3600_000 + 5 * 60_000)).toBe("2 h 5 min");
    expect(humanDuration(3 * 86400_000)).toBe("3 d");
  });

  it("says never for an unset timestamp", () => {
    expect(ms(undefined)).toBeUndefined();
    expect(ms({ $typeName: "google.protobuf.Timestamp", seconds: 0n, nanos: 0 })).toBeUndefined();
    expect(agoMs(undefined)).toBe("never");
    expect(agoMs(1000, 1000)).toBe("just now");
    expect(agoMs(0, 90_000)).toBe("1 min ago");
  });
});
