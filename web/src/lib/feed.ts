// FleetFeed keeps the dashboard's live picture of the fleet (clusters, bundles, active
// rollouts) from one WatchFleet stream, reconnecting with capped exponential backoff. On every
// (re)connect it re-reads the full lists, so clusters or bundles removed while disconnected
// disappear; stream events that arrive before the lists are replayed on top of them.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Bundle, Cluster } from "../gen/kollect/fleet/v1/types_pb";
import type { Rollout } from "../gen/kollect/fleet/v1/rollout_pb";
import type { WatchFleetResponse } from "../gen/kollect/fleet/v1/fleet_pb";
import type { Fleet } from "../api/client";
import { describe, type Described } from "../api/errors";

export type FeedStatus = "connecting" | "live" | "reconnecting" | "stopped";

export interface FleetSnapshot {
  clusters: ReadonlyMap<string, Cluster>;
  bundles: ReadonlyMap<string, Bundle>;
  /** Rollouts seen as active on connect or changed since, by id. */
  rollouts: ReadonlyMap<string, Rollout>;
  status: FeedStatus;
  /** True once the first full picture has arrived. */
  loaded: boolean;
  error?: Described;
  /** When the next reconnect attempt happens (ms since epoch). */
  retryAt?: number;
  /** Increases with every change: cheap for effects to depend on. */
  version: number;
}

interface Maps {
  clusters: Map<string, Cluster>;
  bundles: Map<string, Bundle>;
  rollouts: Map<string, Rollout>;
}

export const backoff = { initialMs: 1000, maxMs: 30000 };

/** Delay before reconnect attempt n (0-based): doubling from initialMs, capped, ±20 % jitter. */
export function retryDelay(attempt: number, random = Math.random): number {
  const base = Math.min(backoff.maxMs, backoff.initialMs * 2 ** attempt);
  return Math.round(base * (0.8 + 0.4 * random()));
}

export function applyEvent(m: Maps, ev: WatchFleetResponse): void {
  const e = ev.event;
  switch (e.case) {
    case "cluster":
      m.clusters.set(e.value.name, e.value);
      break;
    case "clusterRemoved":
      m.clusters.delete(e.value);
      break;
    case "bundle":
      m.bundles.set(e.value.name, e.value);
      break;
    case "bundleRemoved":
      m.bundles.delete(e.value);
      break;
    case "rollout":
      m.rollouts.set(e.value.id.toString(), e.value);
      break;
  }
}

export class FleetFeed {
  private snap: FleetSnapshot;
  private maps: Maps = { clusters: new Map(), bundles: new Map(), rollouts: new Map() };
  private listeners = new Set<() => void>();
  private abort?: AbortController;
  private publishTimer?: ReturnType<typeof setTimeout>;
  private wake?: () => void;

  constructor(private fleet: Fleet) {
    this.snap = { ...this.freeze(), status: "connecting", loaded: false, version: 0 };
  }

  subscribe = (fn: () => void): (() => void) => {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  };

  getSnapshot = (): FleetSnapshot => this.snap;

  start(): void {
    if (this.abort) return;
    this.abort = new AbortController();
    void this.run(this.abort.signal);
  }

  stop(): void {
    this.abort?.abort();
    this.abort = undefined;
    this.set({ status: "stopped" });
  }

  /** Reconnect now instead of waiting for the backoff. */
  retryNow(): void {
    this.wake?.();
  }

  private freeze() {
    return { clusters: new Map(this.maps.clusters), bundles: new Map(this.maps.bundles), rollouts: new Map(this.maps.rollouts) };
  }

  private set(patch: Partial<FleetSnapshot>): void {
    this.snap = { ...this.snap, ...patch, version: this.snap.version + 1 };
    this.listeners.forEach((fn) => fn());
  }

  /** Publishes map changes at most every 100 ms, so a burst of events renders once. */
  private schedulePublish(): void {
    if (this.publishTimer) return;
    this.publishTimer = setTimeout(() => {
      this.publishTimer = undefined;
      this.set({ ...this.freeze() });
    }, 100);
  }

  private async run(signal: AbortSignal): Promise<void> {
    let attempt = 0;
    while (!signal.aborted) {
      let gotData = false;
      try {
        gotData = await this.connect(signal);
        if (!signal.aborted) this.set({ error: undefined });
      } catch (err) {
        if (signal.aborted) return;
        const described = describe(err);
        if (err instanceof ConnectError && (err.code === Code.Unauthenticated || err.code === Code.PermissionDenied)) {
          // Retrying cannot help: the token was revoked or lacks the role.
          this.set({ status: "stopped", error: described });
          return;
        }
        this.set({ error: described });
      }
      if (signal.aborted) return;
      if (gotData) attempt = 0;
      const delay = retryDelay(attempt++);
      this.set({ status: "reconnecting", retryAt: Date.now() + delay });
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, delay);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
        signal.addEventListener("abort", () => {
          clearTimeout(t);
          resolve();
        });
      });
      this.wake = undefined;
    }
  }

  /** One stream's life; resolves when it ends, reporting whether any data arrived. */
  private async connect(signal: AbortSignal): Promise<boolean> {
    const ctl = new AbortController();
    const onAbort = () => ctl.abort();
    signal.addEventListener("abort", onAbort);
    let pending: WatchFleetResponse[] | null = [];
    let gotData = false;
    const lists = Promise.allSettled([
      this.fleet.listClusters({}, { signal: ctl.signal }),
      this.fleet.listBundles({}, { signal: ctl.signal }),
      this.fleet.listRollouts({ activeOnly: true }, { signal: ctl.signal }),
    ]).then(([clusters, bundles, rollouts]) => {
      if (clusters.status === "rejected") throw clusters.reason;
      const fresh: Maps = { clusters: new Map(), bundles: new Map(), rollouts: new Map() };
      for (const c of clusters.value.clusters) fresh.clusters.set(c.name, c);
      if (bundles.status === "fulfilled") for (const b of bundles.value.bundles) fresh.bundles.set(b.name, b);
      // A hub without rollouts answers Unimplemented: the stream still carries what exists.
      if (rollouts.status === "fulfilled") for (const r of rollouts.value.rollouts) fresh.rollouts.set(r.id.toString(), r);
      for (const ev of pending ?? []) applyEvent(fresh, ev);
      pending = null;
      this.maps = fresh;
      gotData = true;
      this.set({ ...this.freeze(), status: "live", loaded: true, error: undefined, retryAt: undefined });
    });
    // A failed list ends this attempt; the stream is cancelled with it.
    let listErr: unknown;
    const listed = lists.catch((err) => {
      listErr = err;
      ctl.abort();
    });
    try {
      for await (const ev of this.fleet.watchFleet({}, { signal: ctl.signal })) {
        if (pending) {
          pending.push(ev);
          continue;
        }
        applyEvent(this.maps, ev);
        this.schedulePublish();
      }
      await listed;
    } catch (err) {
      throw listErr ?? err;
    } finally {
      ctl.abort();
      signal.removeEventListener("abort", onAbort);
    }
    if (listErr) throw listErr;
    return gotData;
  }
}
