import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it, vi } from "vitest";
import { WatchFleetResponseSchema, type WatchFleetResponse } from "../gen/kollect/fleet/v1/fleet_pb";
import { ClusterSchema, ClusterState, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import type { Fleet } from "../api/client";
import { FleetFeed, backoff, retryDelay } from "./feed";

const cluster = (name: string, state = ClusterState.ONLINE): Cluster => create(ClusterSchema, { name, state });
const event = (c: Cluster): WatchFleetResponse => create(WatchFleetResponseSchema, { event: { case: "cluster", value: c } });

/**
 * A FleetService whose lists and WatchFleet streams are scripted per connection: each stream
 * yields its events, then waits until the test ends it (with an error or cleanly).
 */
function scripted(connections: { clusters: Cluster[]; events: WatchFleetResponse[]; fail?: Error }[]) {
  let n = 0;
  const enders: ((err?: Error) => void)[] = [];
  const fleet = {
    listClusters: async () => ({ clusters: connections[Math.min(n, connections.length - 1)].clusters }),
    listBundles: async () => ({ bundles: [] }),
    listRollouts: async () => {
      throw new ConnectError("rollouts are not implemented", Code.Unimplemented);
    },
    watchFleet: (_req: unknown, opts: { signal: AbortSignal }) => {
      const conn = connections[Math.min(n++, connections.length - 1)];
      return (async function* () {
        if (conn.fail) throw conn.fail;
        for (const ev of conn.events) yield ev;
        await new Promise<void>((resolve, reject) => {
          enders.push((err) => (err ? reject(err) : resolve()));
          opts.signal.addEventListener("abort", () => resolve());
        });
      })();
    },
  } as unknown as Fleet;
  return { fleet, end: (err?: Error) => enders.shift()?.(err), connections: () => n };
}

async function until(cond: () => boolean) {
  for (let i = 0; i < 200 && !cond(); i++) await vi.advanceTimersByTimeAsync(50);
  expect(cond()).toBe(true);
}

afterEach(() => {
  vi.useRealTimers();
});

describe("retryDelay", () => {
  it("doubles from one second up to thirty, with jitter", () => {
    expect(retryDelay(0, () => 0.5)).toBe(backoff.initialMs);
    expect(retryDelay(3, () => 0.5)).toBe(8000);
    expect(retryDelay(20, () => 0.5)).toBe(backoff.maxMs);
    expect(retryDelay(0, () => 0)).toBe(800);
    expect(retryDelay(0, () => 1)).toBe(1200);
  });
});

describe("FleetFeed", () => {
  it("applies stream events on top of the lists and survives a hub without rollouts", async () => {
    vi.useFakeTimers();
    const hub = scripted([{ clusters: [cluster("a"), cluster("b")], events: [event(cluster("b", ClusterState.STALE)), event(cluster("c"))] }]);
    const feed = new FleetFeed(hub.fleet);
    feed.start();
    await until(() => feed.getSnapshot().clusters.size === 3);
    const snap = feed.getSnapshot();
    expect(snap.status).toBe("live");
    expect(snap.clusters.get("b")?.state).toBe(ClusterState.STALE);
    feed.stop();
  });

  it("reconnects with backoff and forgets clusters removed meanwhile", async () => {
    vi.useFakeTimers();
    const hub = scripted([
      { clusters: [cluster("a"), cluster("gone")], events: [] },
      { clusters: [cluster("a")], events: [] },
    ]);
    const feed = new FleetFeed(hub.fleet);
    feed.start();
    await until(() => feed.getSnapshot().clusters.size === 2);
    hub.end(new ConnectError("connection reset", Code.Unavailable));
    await until(() => feed.getSnapshot().status === "reconnecting");
    expect(feed.getSnapshot().clusters.size).toBe(2); // the last picture stays on screen
    expect(feed.getSnapshot().error?.title).toBe("The hub is unreachable");
    await until(() => hub.connections() === 2 && feed.getSnapshot().status === "live");
    expect([...feed.getSnapshot().clusters.keys()]).toEqual(["a"]);
    expect(feed.getSnapshot().error).toBeUndefined();
    feed.stop();
  });

  it("stops retrying when the token is refused", async () => {
    vi.useFakeTimers();
    const hub = scripted([{ clusters: [], events: [], fail: new ConnectError("unknown or revoked API token", Code.Unauthenticated) }]);
    const feed = new FleetFeed(hub.fleet);
    feed.start();
    await until(() => feed.getSnapshot().status === "stopped");
    await vi.advanceTimersByTimeAsync(60_000);
    expect(hub.connections()).toBe(1);
    expect(feed.getSnapshot().error?.title).toBe("The hub did not accept your API token");
  });
});
