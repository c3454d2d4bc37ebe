import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { SessionContext, type Session } from "../api/context";
import type { Fleet } from "../api/client";
import { GetClusterResponseSchema } from "../gen/kollect/fleet/v1/fleet_pb";
import { AgentStatusSchema, ClusterSchema, ClusterState, Role, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import type { FleetFeed, FleetSnapshot } from "../lib/feed";
import { Overview } from "./Overview";

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
    }),
  );
}

function session(clusters: Cluster[]): Session {
  const snap: FleetSnapshot = {
    clusters: new Map(clusters.map((c) => [c.name, c])),
    bundles: new Map(),
    rollouts: new Map(),
    status: "live",
    loaded: true,
    version: 1,
  };
  const feed = { subscribe: () => () => {}, getSnapshot: () => snap } as unknown as FleetFeed;
  const fleet = {
    // One cluster's status cannot be read; every other row must still show its own.
    getCluster: async ({ name }: { name: string }) => {
      if (name === "c-0001") throw new ConnectError("cluster c-0001: store timeout", Code.Unavailable);
      return create(GetClusterResponseSchema, {
        status: create(AgentStatusSchema, { inventories: [{ namespace: "a", name: "inv", itemCount: 1234n }] }),
      });
    },
  } as unknown as Fleet;
  return { fleet, feed, role: Role.VIEWER, signOut: () => {} };
}

function renderOverview(n: number) {
  return render(
    <SessionContext.Provider value={session(fleetOf(n))}>
      <Overview />
    </SessionContext.Provider>,
  );
}

describe("Overview", () => {
  it("counts a thousand clusters and draws one page of them", () => {
    renderOverview(1000);
    const counts = screen.getByRole("region", { name: "Fleet counts" });
    expect(within(counts).getByRole("button", { name: /1,000\s*clusters/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /999\s*online/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /1\s*offline/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /1\s*config skew/ })).toBeTruthy();
    const rows = within(screen.getByRole("table", { name: "Clusters" })).getAllByRole("row");
    expect(rows).toHaveLength(51);
  });

  it("filters by label and by state, and highlights skew", () => {
    renderOverview(20);
    fireEvent.change(screen.getByLabelText("Filter clusters"), { target: { value: "env=prod" } });
    expect(screen.getByText("10 of 20 clusters")).toBeTruthy();
    fireEvent.change(screen.getByLabelText("Filter clusters"), { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: /config skew/ }));
    const rows = within(screen.getByRole("table", { name: "Clusters" })).getAllByRole("row").slice(1);
    expect(rows).toHaveLength(1);
    expect(rows[0].className).toBe("skew");
    expect(rows[0].textContent).toContain("base 1 → 2");
  });

  it("one unreadable cluster shows its error in its own row only", async () => {
    renderOverview(4);
    const table = screen.getByRole("table", { name: "Clusters" });
    await waitFor(() => expect(within(table).getAllByText("1,234")).toHaveLength(3));
    const bad = within(table).getByRole("row", { name: /c-0001/ });
    expect(within(bad).getAllByRole("alert")[0].textContent).toContain("store timeout");
  });
});
