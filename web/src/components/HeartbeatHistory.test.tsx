import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { render, screen, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { ClusterState, HeartbeatRecordSchema } from "../gen/kollect/fleet/v1/types_pb";
import { HeartbeatHistory } from "./HeartbeatHistory";

const t0 = Date.UTC(2026, 10, 30, 12, 0, 0);

// Newest first, as ListHeartbeats answers: first heartbeat, config applied, items grow, a
// heartbeat after an offline stretch.
const records = [
  { at: 40, state: ClusterState.OFFLINE, digest: "sha256:bbbbbbbbbbbbbbbb", items: 130n },
  { at: 3, state: ClusterState.ONLINE, digest: "sha256:bbbbbbbbbbbbbbbb", items: 120n },
  { at: 1, state: ClusterState.ONLINE, digest: "sha256:bbbbbbbbbbbbbbbb", items: 100n },
  { at: 0, state: ClusterState.PENDING, digest: "", items: 100n },
].map((r) =>
  create(HeartbeatRecordSchema, {
    time: timestampFromMs(t0 + r.at * 60_000),
    state: r.state,
    agentVersion: "v0.4.0",
    appliedConfigDigest: r.digest,
    inventories: 2n,
    items: r.items,
    inventoriesNotReady: r.at === 0 ? 2n : 0n,
    sinkErrors: r.at === 40 ? 1n : 0n,
  }),
);

describe("HeartbeatHistory", () => {
  it("draws items over time and one row per record, newest first", () => {
    render(<HeartbeatHistory records={records} />);
    expect(screen.getByRole("img").getAttribute("aria-label")).toBe("Items over time: 100 to 130 (lowest 100, highest 130)");
    const points = screen.getByRole("img").querySelector("polyline")!.getAttribute("points")!.split(" ");
    expect(points).toHaveLength(4);
    // Oldest at the left, lowest count at the bottom.
    expect(points[0]).toBe("3.0,45.0");
    expect(points[3]).toBe("317.0,3.0");
    const rows = within(screen.getByRole("table", { name: "Heartbeat history" })).getAllByRole("row").slice(1);
    expect(rows.map((r) => within(r).getAllByRole("cell")[1].textContent)).toEqual([
      "back after offline",
      "online",
      "online",
      "first heartbeat",
    ]);
    expect(within(rows[3]).getAllByRole("cell")[4].textContent).toBe("2 (2 not ready)");
    expect(within(rows[0]).getAllByRole("cell")[6].textContent).toBe("1");
    // The record where the applied configuration changed is marked.
    expect(within(rows[2]).getAllByRole("cell")[3].querySelector(".skewmark")?.textContent).toBe("bbbbbbbbbbbb");
    expect(within(rows[1]).getAllByRole("cell")[3].querySelector(".skewmark")).toBeNull();
  });

  it("says so when there is nothing yet, and draws no line from one record", () => {
    const { unmount } = render(<HeartbeatHistory records={[]} />);
    expect(screen.getByText("No heartbeat recorded yet.")).toBeTruthy();
    unmount();
    render(<HeartbeatHistory records={records.slice(3)} />);
    expect(screen.queryByRole("img")).toBeNull();
    expect(within(screen.getByRole("table", { name: "Heartbeat history" })).getAllByRole("row")).toHaveLength(2);
  });
});
