import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { fireEvent, render, screen, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { Fleet } from "../api/client";
import { SessionContext, type Session } from "../api/context";
import { GetFleetHealthResponseSchema } from "../gen/kollect/fleet/v1/fleet_pb";
import { ClusterSchema, ClusterState, Role, SinkErrorClass } from "../gen/kollect/fleet/v1/types_pb";
import type { FleetFeed, FleetSnapshot } from "../lib/feed";
import { Freshness } from "./Freshness";

const now = Date.now();
const reason = "sink not found: no KollectDatabaseSink team/gone in this cluster, named by inventory team/pods";

function session(): Session {
  const snap: FleetSnapshot = {
    clusters: new Map([["alpha", create(ClusterSchema, { name: "alpha", state: ClusterState.ONLINE, lastHeartbeat: timestampFromMs(now) })]]),
    bundles: new Map(),
    rollouts: new Map(),
    status: "live",
    loaded: true,
    version: 1,
  };
  const feed = { subscribe: () => () => {}, getSnapshot: () => snap } as unknown as FleetFeed;
  const health = create(GetFleetHealthResponseSchema, {
    computedAt: timestampFromMs(now),
    exportFreshness: [
      {
        cluster: "alpha",
        sinkKind: "KollectDatabaseSink",
        sinkNamespace: "team",
        sinkName: "db",
        sinkType: "postgres",
        lastSuccessTime: timestampFromMs(now - 60_000),
        lag: durationFromMs(60_000),
      },
      {
        cluster: "alpha",
        sinkKind: "KollectDatabaseSink",
        sinkNamespace: "team",
        sinkName: "gone",
        sinkNotFound: true,
        lastError: reason,
        errorClass: SinkErrorClass.TERMINAL,
      },
    ],
  });
  const fleet = new Proxy(
    {},
    {
      get: (_, method: string) => async () => {
        if (method !== "getFleetHealth") throw new Error(`unexpected call ${method}`);
        return health;
      },
    },
  ) as Fleet;
  return { fleet, feed, name: "reader", role: Role.VIEWER, signOut: () => {} };
}

describe("Freshness", () => {
  it("shows a sink that does not exist as an error cell saying so, beside the sink that exports", async () => {
    render(
      <SessionContext.Provider value={session()}>
        <Freshness />
      </SessionContext.Provider>,
    );
    const missing = await screen.findByRole("button", { name: "alpha team/gone: sink not found" });
    expect(missing.textContent).toBe("sink not found");
    expect(missing.className).toContain("cls-terminal");
    const exporting = screen.getByRole("button", { name: /^alpha team\/db: / });
    expect(exporting.textContent).not.toContain("not found");
    expect(exporting.className).toContain("age-fresh");
    // The column of the missing sink is there, and says its type is unknown.
    expect(screen.getByRole("table", { name: "Freshness matrix" }).querySelector('[data-sink="KollectDatabaseSink/team/gone"]')?.textContent).toContain(
      "database · ?",
    );
    fireEvent.click(missing);
    const cause = screen.getByRole("region", { name: "Export cause" });
    expect(within(cause).getByTestId("cause").textContent).toBe(reason);
    expect(cause.textContent).toContain("create the sink, or fix the inventory's reference");
  });
});
