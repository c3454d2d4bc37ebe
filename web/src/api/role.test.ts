import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import type { Fleet } from "./client";
import { inferRole } from "./role";

// A FleetService that answers like the hub's authoriser for a token of the given role.
function hubAs(role: Role | "revoked"): Fleet {
  const deny = (needed: Role) => {
    if (role === "revoked") throw new ConnectError("unknown or revoked API token", Code.Unauthenticated);
    if (role < needed) throw new ConnectError(`needs role ${needed}`, Code.PermissionDenied);
  };
  return {
    listAPITokens: async () => {
      deny(Role.ADMIN);
      return { tokens: [] };
    },
    setClusterLabels: async () => {
      deny(Role.OPERATOR);
      throw new ConnectError('labels: key "-not a label key-": invalid', Code.InvalidArgument);
    },
  } as unknown as Fleet;
}

describe("inferRole", () => {
  it("tells the three roles apart", async () => {
    expect(await inferRole(hubAs(Role.ADMIN))).toBe(Role.ADMIN);
    expect(await inferRole(hubAs(Role.OPERATOR))).toBe(Role.OPERATOR);
    expect(await inferRole(hubAs(Role.VIEWER))).toBe(Role.VIEWER);
  });

  it("passes on a refused token", async () => {
    await expect(inferRole(hubAs("revoked"))).rejects.toMatchObject({ code: Code.Unauthenticated });
  });
});
