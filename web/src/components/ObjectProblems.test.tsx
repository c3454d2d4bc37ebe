import { create } from "@bufbuild/protobuf";
import { render, screen, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { AgentStatusSchema, ApplyResult } from "../gen/kollect/fleet/v1/types_pb";
import { ObjectProblems } from "./ObjectProblems";

const ref = (kind: string, namespace: string, name: string) => ({ apiVersion: "v1", kind, namespace, name });

// What the shipped agent reported in e2e/fleet's TestAllowlistRefusals, and a revert.
const st = create(AgentStatusSchema, {
  bundles: [
    {
      bundle: "restricted",
      revision: 2n,
      objects: [
        { object: ref("Deployment", "kollect-system", "intruder"), result: ApplyResult.REFUSED, message: "Deployment.apps is not a Kollect kind" },
        { object: ref("KollectProfile", "kollect-system", "allowed"), result: ApplyResult.APPLIED },
        {
          object: ref("KollectProfile", "team-x", "outside"),
          result: ApplyResult.REFUSED,
          message: "namespace team-x is not in the agent's allowlist (kollect-system)",
        },
        { object: ref("KollectClusterInventory", "", "fleet"), result: ApplyResult.DRIFT_REVERTED, message: "deleted locally; re-created" },
      ],
    },
  ],
});

describe("ObjectProblems", () => {
  it("names every refused object with its reason, and every revert", () => {
    render(<ObjectProblems st={st} />);
    const refused = within(screen.getByRole("list", { name: "Objects not applied" })).getAllByRole("listitem");
    expect(refused.map((li) => li.textContent)).toEqual([
      "refused Deployment kollect-system/intruder (bundle restricted): Deployment.apps is not a Kollect kind",
      "refused KollectProfile team-x/outside (bundle restricted): namespace team-x is not in the agent's allowlist (kollect-system)",
    ]);
    const drift = within(screen.getByRole("list", { name: "Drift events" })).getAllByRole("listitem");
    expect(drift.map((li) => li.textContent)).toEqual(["drift reverted KollectClusterInventory fleet (bundle restricted): deleted locally; re-created"]);
  });

  it("says so when every object was applied", () => {
    render(<ObjectProblems st={create(AgentStatusSchema, {})} />);
    expect(screen.getByText("The agent applied every object of its bundles.")).toBeTruthy();
    expect(screen.queryByRole("list", { name: "Objects not applied" })).toBeNull();
  });
});
