import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { SessionContext, type Session } from "../api/context";
import type { Fleet } from "../api/client";
import { PreviewBundleResponseSchema, type PreviewBundleRequest } from "../gen/kollect/fleet/v1/preview_pb";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import type { FleetFeed } from "../lib/feed";
import { PreviewPanel } from "./PreviewPanel";

/** A session whose hub answers PreviewBundle with answer (or throws it) and records the requests. */
function session(answer: unknown): { s: Session; asked: PreviewBundleRequest[] } {
  const asked: PreviewBundleRequest[] = [];
  const fleet = new Proxy(
    {},
    {
      get: (_, method: string) => async (req: PreviewBundleRequest) => {
        if (method !== "previewBundle") throw new Error(`unexpected call ${method}`);
        asked.push(req);
        if (answer instanceof Error) throw answer;
        return answer;
      },
    },
  ) as Fleet;
  return { s: { fleet, feed: {} as FleetFeed, name: "ops", role: Role.OPERATOR, signOut: () => {} }, asked };
}

function renderPanel(s: Session) {
  render(
    <SessionContext.Provider value={s}>
      <PreviewPanel manifests="kind: KollectProfile\n" bundle=" workloads " />
    </SessionContext.Provider>,
  );
}

describe("PreviewPanel", () => {
  it("asks the clusters the selector picks and shows their answers", async () => {
    const { s, asked } = session(create(PreviewBundleResponseSchema, { previewId: "pv-1", results: [{ cluster: "canary-1" }] }));
    renderPanel(s);
    const button = screen.getByRole("button", { name: "Preview on clusters" });
    expect((button as HTMLButtonElement).disabled).toBe(true); // no selector: the hub would refuse
    fireEvent.change(screen.getByLabelText(/Preview selector/), { target: { value: "ring=canary, region in (eu,us)" } });
    fireEvent.change(screen.getByLabelText(/Sample rows per target/), { target: { value: "2" } });
    fireEvent.click(button);
    await screen.findByRole("region", { name: "Preview on canary-1" });
    expect(asked).toHaveLength(1);
    expect(asked[0].bundle).toBe("workloads");
    expect(asked[0].maxSamples).toBe(2);
    expect(asked[0].clusterSelector?.matchLabels).toEqual({ ring: "canary" });
    expect(asked[0].clusterSelector?.matchExpressions.map((e) => [e.key, e.operator, e.values])).toEqual([["region", "In", ["eu", "us"]]]);
  });

  it("shows the hub's refusal", async () => {
    const { s } = session(new ConnectError("cluster selector ring=nowhere selects no cluster", Code.FailedPrecondition));
    renderPanel(s);
    fireEvent.change(screen.getByLabelText(/Preview selector/), { target: { value: "ring=nowhere" } });
    fireEvent.click(screen.getByRole("button", { name: "Preview on clusters" }));
    await waitFor(() => expect(screen.getByRole("alert").textContent).toContain("selects no cluster"));
  });
});
