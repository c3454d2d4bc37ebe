import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { SessionContext, type Session } from "../api/context";
import type { Fleet } from "../api/client";
import { ListClustersResponseSchema } from "../gen/kollect/fleet/v1/fleet_pb";
import { ClusterSchema, ClusterState, Role, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import type { FleetFeed, FleetSnapshot } from "../lib/feed";
import { Overview, noRecentExport } from "./Overview";

const now = Date.now();

function fleetOf(n: number): Cluster[] {
  return Array.from({ length: n }, (_, i) =>
    create(ClusterSchema, {
      name: `c-${String(i).padStart(4, "0")}`,
      labels: { env: i % 2 ? "prod" : "dev" },
      state: i === 3 ? ClusterState.OFFLINE : ClusterState.ONLINE,
      agentVersion: i === 5 ? "v0.3.0" : "v0.4.0",
      versionSkew: i === 5,
      configInSync: i !== 7,
      bundles: [{ bundle: "base", desiredRevision: 2n, appliedRevision: i === 7 ? 1n : 2n, failedObjects: 0n }],
      lastHeartbeat: timestampFromMs(now - 10 * 60_000),
      inventories: 2n,
      items: BigInt(1000 + i),
      inventoriesNotReady: i === 2 ? 1n : 0n,
      lastExportTime: i === 4 ? undefined : timestampFromMs(now - (i === 6 ? 2 : 0) * 3600_000 - 30_000),
    }),
  );
}

/** A session whose ListClusters answers `refresh` (or fails with it), counting the calls. */
function session(clusters: Cluster[], refresh: Cluster[] | Error = clusters): { s: Session; calls: string[] } {
  const snap: FleetSnapshot = {
    clusters: new Map(clusters.map((c) => [c.name, c])),
    bundles: new Map(),
    rollouts: new Map(),
    status: "live",
    loaded: true,
    version: 1,
  };
  const feed = { subscribe: () => () => {}, getSnapshot: () => snap } as unknown as FleetFeed;
  const calls: string[] = [];
  const fleet = new Proxy(
    {},
    {
      get: (_, method: string) => async () => {
        calls.push(method);
        if (method !== "listClusters") throw new Error(`unexpected call ${method}`);
        if (refresh instanceof Error) throw refresh;
        return create(ListClustersResponseSchema, { clusters: refresh });
      },
    },
  ) as Fleet;
  return { s: { fleet, feed, name: "reader", role: Role.VIEWER, signOut: () => {} }, calls };
}

function renderOverview(s: Session) {
  return render(
    <SessionContext.Provider value={s}>
      <Overview />
    </SessionContext.Provider>,
  );
}

const tableRows = () => within(screen.getByRole("table", { name: "Clusters" })).getAllByRole("row").slice(1);
const cell = (row: HTMLElement, column: number) => within(row).getAllByRole("cell")[column].textContent;

describe("Overview", () => {
  it("counts a thousand clusters and draws one page of them", () => {
    renderOverview(session(fleetOf(1000)).s);
    const counts = screen.getByRole("region", { name: "Fleet counts" });
    expect(within(counts).getByRole("button", { name: /1,000\s*clusters/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /999\s*online/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /1\s*offline/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /1\s*config skew/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /1\s*inventories not ready/ })).toBeTruthy();
    expect(tableRows()).toHaveLength(50);
  });

  it("filters by label and by state, and highlights skew", () => {
    renderOverview(session(fleetOf(20)).s);
    fireEvent.change(screen.getByLabelText("Filter clusters"), { target: { value: "env=prod" } });
    expect(screen.getByText("10 of 20 clusters")).toBeTruthy();
    fireEvent.change(screen.getByLabelText("Filter clusters"), { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: /config skew/ }));
    const rows = tableRows();
    expect(rows).toHaveLength(1);
    expect(rows[0].className).toBe("skew");
    expect(rows[0].textContent).toContain("base 1 → 2");
  });

  it("shows, sorts and filters inventories, rows and last export from the cluster list alone", async () => {
    const { s, calls } = session(fleetOf(10));
    renderOverview(s);
    // Columns: cluster, state, labels, agent, kubernetes, revisions, inventories, rows, last export.
    const c2 = tableRows()[2];
    expect(cell(c2, 6)).toBe("2 (1 not ready)");
    expect(cell(c2, 7)).toBe("1,002");
    expect(cell(tableRows()[4], 8)).toBe("none");
    expect(cell(tableRows()[6], 8)).toBe("2 h ago");
    fireEvent.click(screen.getByRole("button", { name: "Rows" }));
    fireEvent.click(screen.getByRole("button", { name: "Rows" })); // descending
    expect(cell(tableRows()[0], 0)).toBe("c-0009");
    fireEvent.change(screen.getByLabelText("State"), { target: { value: "noexport" } });
    expect(tableRows().map((r) => cell(r, 0))).toEqual(["c-0006", "c-0004"]);
    fireEvent.change(screen.getByLabelText("State"), { target: { value: "notready" } });
    expect(tableRows().map((r) => cell(r, 0))).toEqual(["c-0002"]);
    // No call per row: only the one ListClusters that refreshes heartbeat times.
    await waitFor(() => expect(calls).toEqual(["listClusters"]));
  });

  it("takes newer heartbeat times from one ListClusters, and keeps the table when that fails", async () => {
    const live = fleetOf(3);
    const fresher = fleetOf(3).map((c, i) => (i === 1 ? { ...c, lastHeartbeat: timestampFromMs(Date.now() - 3_000) } : c));
    const { unmount } = renderOverview(session(live, fresher).s);
    await waitFor(() => expect(cell(tableRows()[1], 10)).toMatch(/^\d s ago$/));
    expect(cell(tableRows()[0], 10)).toBe("10 min ago");
    unmount();

    renderOverview(session(live, new ConnectError("store timeout", Code.Unavailable)).s);
    await waitFor(() => expect(screen.getByRole("alert").textContent).toContain("store timeout"));
    expect(tableRows()).toHaveLength(3);
    expect(cell(tableRows()[1], 10)).toBe("10 min ago");
  });
});

describe("noRecentExport", () => {
  const base = { name: "c", state: ClusterState.ONLINE, lastHeartbeat: timestampFromMs(now - 60_000) };
  it("keeps a quiet cluster whose sinks keep being confirmed fresh", () => {
    const quiet = create(ClusterSchema, {
      ...base,
      lastExportTime: timestampFromMs(now - 2 * 24 * 3600_000),
      oldestConfirmTime: timestampFromMs(now - 4 * 60_000),
    });
    expect(noRecentExport(quiet, now)).toBe(false);
  });
  it("flags a cluster whose oldest confirmation is over an hour old", () => {
    const stopped = create(ClusterSchema, {
      ...base,
      lastExportTime: timestampFromMs(now - 2 * 3600_000),
      oldestConfirmTime: timestampFromMs(now - 2 * 3600_000),
    });
    expect(noRecentExport(stopped, now)).toBe(true);
  });
  it("falls back to the last export for an agent that reports no confirmation", () => {
    const old = create(ClusterSchema, { ...base, lastExportTime: timestampFromMs(now - 2 * 3600_000) });
    expect(noRecentExport(old, now)).toBe(true);
  });
});
