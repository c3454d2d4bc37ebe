// The hub has no "who am I" call, so the dashboard infers its token's role from how the hub's
// authoriser answers two calls that cannot change anything:
//   - ListAPITokens is admin-only and read-only: success means admin.
//   - SetClusterLabels is operator-level; sent with an invalid label key, an operator's call
//     passes authorisation and is refused by the handler's label check (InvalidArgument) before
//     the store is touched, while a viewer's is refused by the authoriser (PermissionDenied).
// Any other answer (Unauthenticated, Unavailable) is the caller's to show.
import { Code, ConnectError } from "@connectrpc/connect";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import type { Fleet } from "./client";

export async function inferRole(fleet: Fleet): Promise<Role> {
  try {
    await fleet.listAPITokens({});
    return Role.ADMIN;
  } catch (err) {
    if (!(err instanceof ConnectError) || err.code !== Code.PermissionDenied) throw err;
  }
  try {
    await fleet.setClusterLabels({ clusterName: "", labels: { "-not a label key-": "" } });
    // Unreachable with the hub's current checks; an operator could only get here.
    return Role.OPERATOR;
  } catch (err) {
    if (err instanceof ConnectError) {
      if (err.code === Code.PermissionDenied) return Role.VIEWER;
      if (err.code === Code.InvalidArgument || err.code === Code.NotFound) return Role.OPERATOR;
    }
    throw err;
  }
}

export function atLeast(role: Role, needed: Role): boolean {
  return role >= needed;
}

export function roleName(role: Role): string {
  switch (role) {
    case Role.ADMIN:
      return "admin";
    case Role.OPERATOR:
      return "operator";
    case Role.VIEWER:
      return "viewer";
    default:
      return "unknown";
  }
}
