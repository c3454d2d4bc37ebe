// Who the signed-in token is: the hub's WhoAmI answers with the token's name and role, which
// decide the buttons the dashboard offers (the hub checks the role on every call anyway).
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import type { Fleet } from "./client";

export interface Identity {
  name: string;
  role: Role;
}

/** Asks the hub; a refused token fails with the hub's readable ConnectError. */
export async function whoAmI(fleet: Fleet): Promise<Identity> {
  const me = await fleet.whoAmI({});
  return { name: me.name, role: me.role };
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
