import { create } from "@bufbuild/protobuf";
import { render, screen, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { PreviewBundleResponseSchema, PreviewKindState } from "../gen/kollect/fleet/v1/preview_pb";
import { humanBytes } from "../lib/previews";
import { PreviewResults } from "./PreviewResults";

// The CLI's golden preview (agent/internal/cli/hubcmd/preview_test.go), as the hub answers it.
const preview = create(PreviewBundleResponseSchema, {
  previewId: "pv-0a1b2c3d4e5f",
  results: [
    {
      cluster: "canary-east",
      agentVersion: "v0.9.0",
      targets: [
        {
          target: "team-a/deployments",
          group: "apps",
          version: "v1",
          kind: "Deployment",
          kindState: PreviewKindState.SERVED,
          objectsListed: 40n,
          objectsMatched: 31n,
          rows: 31n,
          attributes: [{ name: "replicas", values: 31n, distinctValues: 4n }],
        },
      ],
      inventories: [{ inventory: "team-a/workloads", rows: 31n, estimatedBytes: 7300n }],
    },
    {
      cluster: "canary-west",
      targets: [
        {
          target: "team-a/deployments",
          group: "apps",
          version: "v1",
          kind: "Deployment",
          kindState: PreviewKindState.SERVED,
          objectsListed: 40n,
          objectsMatched: 31n,
          rows: 29n,
          failed: 2n,
          attributes: [
            {
              name: "image",
              values: 29n,
              distinctValues: 1000n,
              distinctValuesCapped: true,
              errors: 2n,
              errorSamples: [
                { object: "team-a/legacy", message: "no such key: containers" },
                { object: "team-a/empty", message: "index out of range" },
              ],
            },
          ],
          samples: [{ object: "team-a/web", attributesJson: '{"image":"web:1"}' }],
        },
        { target: "crons", version: "v1", group: "batch", kind: "CronJob", kindState: PreviewKindState.FORBIDDEN, message: "cronjobs.batch is forbidden" },
      ],
      inventories: [{ inventory: "team-a/workloads", rows: 29n, estimatedBytes: 3400000n }],
    },
    { cluster: "canary-old", error: "kind not allowed by this agent's allowlist" },
  ],
  pending: ["canary-slow"],
  notConnected: ["canary-gone"],
});

const cells = (table: HTMLElement) =>
  within(table)
    .getAllByRole("row")
    .slice(1)
    .map((r) => within(r).getAllByRole("cell").map((c) => c.firstChild?.textContent ?? ""));

describe("PreviewResults", () => {
  it("shows each cluster's targets, attribute errors with object names, cardinality and bytes", () => {
    render(<PreviewResults preview={preview} />);
    expect(screen.getByRole("status").textContent).toBe("Preview pv-0a1b2c3d4e5f: 3 answered, 1 pending, 1 not connected.");
    const west = screen.getByRole("region", { name: "Preview on canary-west" });
    expect(cells(within(west).getByRole("table", { name: "Targets on canary-west" }))).toEqual([
      ["team-a/deployments", "apps/v1 Deployment", "served", "40", "31", "29", "2"],
      ["crons", "batch/v1 CronJob", "forbidden", "0", "0", "0", "0"],
    ]);
    expect(cells(within(west).getByRole("table", { name: "Attributes of team-a/deployments" }))).toEqual([["image", "29", "1,000+", "2"]]);
    expect(within(west).getAllByRole("listitem").map((li) => li.textContent)).toEqual([
      "team-a/legacy: no such key: containers",
      "team-a/empty: index out of range",
      'team-a/web: {"image":"web:1"}',
    ]);
    expect(cells(within(west).getByRole("table", { name: "Inventories on canary-west" }))).toEqual([["team-a/workloads", "29", "3.2 MiB"]]);
    expect(within(west).getByRole("heading").textContent).toContain("crons: forbidden, extraction errors");
    const east = screen.getByRole("region", { name: "Preview on canary-east" });
    expect(within(east).getByRole("heading").textContent).toContain("no problems");
    expect(within(screen.getByRole("region", { name: "Preview on canary-old" })).getByText(/Could not evaluate the bundle: kind not allowed/)).toBeTruthy();
    expect(screen.getByLabelText("Pending clusters").textContent).toBe("Asked, no answer in time: canary-slow");
    expect(screen.getByLabelText("Clusters not connected").textContent).toBe("Not connected, not asked: canary-gone");
  });

  it("prints sizes in binary units", () => {
    expect([0, 1023, 1536, 3400000, 5 * 2 ** 30].map(humanBytes)).toEqual(["0 B", "1023 B", "1.5 KiB", "3.2 MiB", "5.0 GiB"]);
  });
});
