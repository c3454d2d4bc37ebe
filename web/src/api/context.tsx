// The signed-in session: the FleetService client, the token's name and role, and the live
// fleet feed.
import { createContext, useContext, useSyncExternalStore } from "react";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import type { Fleet } from "./client";
import type { FleetFeed, FleetSnapshot } from "../lib/feed";

export interface Session {
  fleet: Fleet;
  /** The API token's name (WhoAmI), as the audit log shows it. */
  name: string;
  role: Role;
  feed: FleetFeed;
  signOut: () => void;
}

export const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const s = useContext(SessionContext);
  if (!s) throw new Error("useSession outside a signed-in session");
  return s;
}

/** The role's minimum for a button: viewer < operator < admin. */
export function useCan(needed: Role): boolean {
  return useSession().role >= needed;
}

export function useFleetSnapshot(): FleetSnapshot {
  const { feed } = useSession();
  return useSyncExternalStore(feed.subscribe, feed.getSnapshot, feed.getSnapshot);
}
