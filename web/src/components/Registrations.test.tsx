import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { Fleet } from "../api/client";
import { SessionContext, type Session } from "../api/context";
import { ClusterApproval, ClusterSchema, ClusterState, Role, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import type { FleetFeed, FleetSnapshot } from "../lib/feed";
import { Overview } from "../pages/Overview";
import { NewRegistrations } from "./Registrations";

const now = Date.now();

function clusters(): Cluster[] {
  const base = { state: ClusterState.ONLINE, agentVersion: "v0.4.0", lastHeartbeat: timestampFromMs(now - 5_000) };
  return [
    create(ClusterSchema, {
      ...base,
      name: "old",
      configInSync: true,
      approval: ClusterApproval.APPROVED,
      registeredAt: timestampFromMs(now - 3 * 24 * 3600_000),
    }),
    create(ClusterSchema, {
      ...base,
      name: "recent",
      configInSync: true,
      approval: ClusterApproval.APPROVED,
      registeredAt: timestampFromMs(now - 3600_000),
      registration: { bootstrapTokenId: "a1b2c3d4e5f6", bootstrapTokenDescription: "for recent", peerAddress: "10.0.0.7" },
    }),
    create(ClusterSchema, {
      ...base,
      name: "stranger",
      agentVersion: "v6.6.6",
      versionSkew: true,
      configInSync: false,
      approval: ClusterApproval.PENDING,
      registeredAt: timestampFromMs(now - 5 * 60_000),
      registration: {
        bootstrapTokenId: "9f8e7d6c5b4a",
        bootstrapTokenDescription: "team laptops",
        bootstrapTokenCreatedBy: "token:admin",
        peerAddress: "203.0.113.7",
        agentVersion: "v6.6.6",
      },
    }),
  ];
}

/** A session of role whose FleetService records every call and answers it with nothing. */
function session(role: Role, list: Cluster[]): { s: Session; calls: [string, unknown][] } {
  const snap: FleetSnapshot = {
    clusters: new Map(list.map((c) => [c.name, c])),
    bundles: new Map(),
    rollouts: new Map(),
    status: "live",
    loaded: true,
    version: 1,
  };
  const feed = { subscribe: () => () => {}, getSnapshot: () => snap } as unknown as FleetFeed;
  const calls: [string, unknown][] = [];
  const fleet = new Proxy(
    {},
    {
      get: (_, method: string) => async (req: unknown) => {
        calls.push([method, req]);
        return method === "listClusters" ? { clusters: list } : {};
      },
    },
  ) as Fleet;
  return { s: { fleet, feed, name: "someone", role, signOut: () => {} }, calls };
}

describe("NewRegistrations", () => {
  it("lists the pending and the recent registrations with token, creator and address, and the admin approves", async () => {
    const { s, calls } = session(Role.ADMIN, clusters());
    render(
      <SessionContext.Provider value={s}>
        <NewRegistrations clusters={clusters()} now={now} />
      </SessionContext.Provider>,
    );
    const rows = within(screen.getByRole("table", { name: "New registrations" })).getAllByRole("row").slice(1);
    // Pending first; the cluster registered three days ago is not new.
    expect(rows.map((r) => within(r).getAllByRole("cell")[0].textContent)).toEqual(["stranger", "recent"]);
    expect(rows[0].textContent).toContain("pending approval");
    expect(rows[0].textContent).toContain("9f8e7d6c5b4a (team laptops)");
    expect(rows[0].textContent).toContain("token:admin");
    expect(rows[0].textContent).toContain("203.0.113.7");
    expect(rows[1].textContent).toContain("approved at registration");
    expect(within(rows[1]).queryByRole("button")).toBeNull();
    fireEvent.click(within(rows[0]).getByRole("button", { name: "Approve stranger" }));
    await waitFor(() => expect(calls).toEqual([["approveCluster", { clusterName: "stranger" }]]));
  });

  it("asks once more before rejecting", async () => {
    const { s, calls } = session(Role.ADMIN, clusters());
    render(
      <SessionContext.Provider value={s}>
        <NewRegistrations clusters={clusters()} now={now} />
      </SessionContext.Provider>,
    );
    fireEvent.click(screen.getByRole("button", { name: "Reject" }));
    expect(calls).toEqual([]);
    expect(screen.getByText(/token 9f8e7d6c5b4a can never register this name again/)).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "Yes" }));
    await waitFor(() => expect(calls).toEqual([["rejectCluster", { clusterName: "stranger" }]]));
  });

  it("shows a viewer the registrations without the buttons", () => {
    const { s } = session(Role.VIEWER, clusters());
    render(
      <SessionContext.Provider value={s}>
        <NewRegistrations clusters={clusters()} now={now} />
      </SessionContext.Provider>,
    );
    expect(screen.getByRole("table", { name: "New registrations" }).textContent).toContain("stranger");
    expect(screen.queryByRole("button", { name: /Approve/ })).toBeNull();
    expect(screen.queryByRole("button", { name: "Reject" })).toBeNull();
  });
});

describe("Overview with a registration pending approval", () => {
  it("marks it, counts it apart, and leaves it out of config and version skew", () => {
    const { s } = session(Role.VIEWER, clusters());
    render(
      <SessionContext.Provider value={s}>
        <Overview />
      </SessionContext.Provider>,
    );
    const counts = screen.getByRole("region", { name: "Fleet counts" });
    expect(within(counts).getByRole("button", { name: /1\s*pending approval/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /0\s*config skew/ })).toBeTruthy();
    expect(within(counts).getByRole("button", { name: /2\s*new registrations/ })).toBeTruthy();
    expect(within(counts).getByText("version skew").previousElementSibling?.textContent).toBe("0");
    const row = within(screen.getByRole("table", { name: "Clusters" })).getAllByRole("row").find((r) => r.textContent?.includes("stranger"));
    expect(row?.textContent).toContain("pending approval");
    const recent = within(screen.getByRole("table", { name: "Clusters" })).getAllByRole("row").find((r) => r.textContent?.includes("recent"));
    expect(recent?.textContent).toContain("new");
    expect(screen.getByRole("region", { name: "New registrations" })).toBeTruthy();
  });
});
