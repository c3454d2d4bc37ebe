import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { WhoAmIResponseSchema } from "../gen/kollect/fleet/v1/fleet_pb";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import type { Fleet } from "./client";
import { roleName, whoAmI } from "./role";

function hubAs(answer: { name: string; role: Role } | "revoked"): { fleet: Fleet; calls: string[] } {
  const calls: string[] = [];
  const fleet = new Proxy(
    {},
    {
      get: (_, method: string) => async () => {
        calls.push(method);
        if (method !== "whoAmI") throw new Error(`unexpected call ${method}`);
        if (answer === "revoked") throw new ConnectError("unknown or revoked API token", Code.Unauthenticated);
        return create(WhoAmIResponseSchema, answer);
      },
    },
  ) as Fleet;
  return { fleet, calls };
}

describe("whoAmI", () => {
  it("takes the name and role from the hub, in one call", async () => {
    for (const role of [Role.VIEWER, Role.OPERATOR, Role.ADMIN]) {
      const { fleet, calls } = hubAs({ name: "deployer", role });
      expect(await whoAmI(fleet)).toEqual({ name: "deployer", role });
      expect(calls).toEqual(["whoAmI"]);
    }
    expect(roleName(Role.OPERATOR)).toBe("operator");
  });

  it("passes on a refused token", async () => {
    await expect(whoAmI(hubAs("revoked").fleet)).rejects.toMatchObject({ code: Code.Unauthenticated });
  });
});
