import { create } from "@bufbuild/protobuf";
import { render, screen, waitFor, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { SessionContext, type Session } from "../api/context";
import type { Fleet } from "../api/client";
import { GetClusterResponseSchema } from "../gen/kollect/fleet/v1/fleet_pb";
import { ApplyResult, ClusterSchema, ClusterState, Role } from "../gen/kollect/fleet/v1/types_pb";
import type { FleetFeed, FleetSnapshot } from "../lib/feed";
import { BundleDetail } from "./BundleDetail";

const refusal = "refused: namespace kollect-system is outside this agent's allowed namespaces (team-b)";

/**
 * A session whose live fleet holds staging-1 with one object of bundle workloads refused, and
 * whose GetCluster answers with that object. The bundle's own reads (revisions, the bundle)
 * never answer, and GetCluster answers last: the page itself then never renders again, and
 * only the refusals' own read renders them, as in a browser when GetCluster answers after the
 * page's other reads (or the refusals poll again).
 */
function session(): Session {
  const cluster = create(ClusterSchema, {
    name: "staging-1",
    state: ClusterState.ONLINE,
    bundles: [{ bundle: "workloads", desiredRevision: 1n, appliedRevision: 1n, failedObjects: 1n }],
  });
  const snap: FleetSnapshot = {
    clusters: new Map([[cluster.name, cluster]]),
    bundles: new Map(),
    rollouts: new Map(),
    status: "live",
    loaded: true,
    version: 1,
  };
  const feed = { subscribe: () => () => {}, getSnapshot: () => snap } as unknown as FleetFeed;
  const fleet = new Proxy(
    {},
    {
      get: (_, method: string) => async () => {
        if (method !== "getCluster") return new Promise(() => {});
        // Later than anything the page itself waits for (its diff query answers at once).
        await new Promise((resolve) => setTimeout(resolve, 20));
        return create(GetClusterResponseSchema, {
          cluster,
          status: {
            bundles: [
              {
                bundle: "workloads",
                revision: 1n,
                objects: [
                  { object: { kind: "KollectProfile", name: "deployments" }, result: ApplyResult.APPLIED },
                  { object: { kind: "KollectSnapshotSink", name: "inventory-repo" }, result: ApplyResult.REFUSED, message: refusal },
                ],
              },
            ],
          },
        });
      },
    },
  ) as Fleet;
  return { fleet, feed, name: "admin", role: Role.ADMIN, signOut: () => {} };
}

describe("BundleDetail", () => {
  it("keeps listing the refused objects when the refusals render again on their own", async () => {
    render(
      <SessionContext.Provider value={session()}>
        <BundleDetail name="workloads" />
      </SessionContext.Provider>,
    );
    // The GetCluster answer renders the refusals alone, with the props of the page's last
    // render: the clusters they were given must still be there to read.
    await waitFor(() => {
      const table = screen.getByRole("table", { name: "Objects not applied by cluster" });
      expect(within(table).getAllByRole("row").map((r) => r.textContent)).toContain(
        `staging-1KollectSnapshotSink inventory-reporefused${refusal}`,
      );
    });
    expect(screen.queryByText("Every cluster that reported this bundle applied all of its objects.")).toBeNull();
    expect(screen.getByText("1 cluster refused or failed to apply objects of this bundle.")).toBeTruthy();
  });
});
