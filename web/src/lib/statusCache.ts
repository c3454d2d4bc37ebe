// Per-cluster heartbeat status (GetCluster) for tables that show inventories and rows: fetched
// only for the rows on screen, at most `concurrency` calls at once, refreshed after ttlMs. A
// cluster whose call fails shows its error in its own row; the others are unaffected.
import { useEffect, useSyncExternalStore } from "react";
import type { GetClusterResponse } from "../gen/kollect/fleet/v1/fleet_pb";
import type { Fleet } from "../api/client";

export interface Entry {
  data?: GetClusterResponse;
  error?: unknown;
  fetchedAt: number;
  inFlight: boolean;
}

const empty: Entry = { fetchedAt: 0, inFlight: false };

export class StatusCache {
  private entries = new Map<string, Entry>();
  private listeners = new Map<string, Set<() => void>>();
  private queue: string[] = [];
  private running = 0;

  constructor(private fleet: Fleet, private ttlMs = 10000, private concurrency = 6) {}

  get(name: string): Entry {
    return this.entries.get(name) ?? empty;
  }

  subscribe(name: string, fn: () => void): () => void {
    let set = this.listeners.get(name);
    if (!set) this.listeners.set(name, (set = new Set()));
    set.add(fn);
    return () => set!.delete(fn);
  }

  /** Asks for a fresh status when the cached one is missing or older than the TTL. */
  want(name: string, now = Date.now()): void {
    const e = this.get(name);
    if (e.inFlight || this.queue.includes(name) || now - e.fetchedAt < this.ttlMs) return;
    this.queue.push(name);
    this.pump();
  }

  private update(name: string, e: Entry): void {
    this.entries.set(name, e);
    this.listeners.get(name)?.forEach((fn) => fn());
  }

  private pump(): void {
    while (this.running < this.concurrency && this.queue.length) {
      const name = this.queue.shift()!;
      this.running++;
      this.update(name, { ...this.get(name), inFlight: true });
      this.fleet
        .getCluster({ name })
        .then(
          (data) => this.update(name, { data, fetchedAt: Date.now(), inFlight: false }),
          (error) => this.update(name, { ...this.get(name), error, fetchedAt: Date.now(), inFlight: false }),
        )
        .finally(() => {
          this.running--;
          this.pump();
        });
    }
  }
}

export function useClusterStatus(cache: StatusCache, name: string, refreshKey?: unknown): Entry {
  const entry = useSyncExternalStore(
    (fn) => cache.subscribe(name, fn),
    () => cache.get(name),
  );
  useEffect(() => {
    cache.want(name);
    const t = setInterval(() => cache.want(name), 5000);
    return () => clearInterval(t);
  }, [cache, name, refreshKey]);
  return entry;
}
