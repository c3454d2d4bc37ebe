// What the dashboard says about how clusters joined the fleet: registrations that wait for an
// admin's approval, and recent ones an admin should notice even though no approval was needed.
import { ClusterApproval, type Cluster, type Registration } from "../gen/kollect/fleet/v1/types_pb";
import { ms } from "./format";

/** A registration is "new" for a day, so that an admin who looks once a day sees every one. */
export const newRegistrationMs = 24 * 3600_000;

/** The cluster waits for an admin: it receives no bundle and counts in no fleet total. */
export function pendingApproval(c: Cluster): boolean {
  return c.approval === ClusterApproval.PENDING;
}

/** Pending approval, or registered (and not rejected) within the last day. */
export function isNewRegistration(c: Cluster, now: number): boolean {
  if (pendingApproval(c)) return true;
  const at = ms(c.registeredAt);
  return at !== undefined && c.approval !== ClusterApproval.REJECTED && now - at < newRegistrationMs;
}

/** "a1b2c3d4e5f6 (team laptops)": the bootstrap token a cluster registered with. */
export function tokenLabel(r: Registration | undefined): string {
  if (!r?.bootstrapTokenId) return "not recorded (registered before the hub recorded it)";
  return r.bootstrapTokenDescription ? `${r.bootstrapTokenId} (${r.bootstrapTokenDescription})` : r.bootstrapTokenId;
}

/** Counts in the fleet's totals (config skew, version skew): approved, or from an older hub. */
export function inFleetTotals(c: Cluster): boolean {
  return !pendingApproval(c);
}
