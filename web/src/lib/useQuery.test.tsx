import { act, render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { useQuery } from "./useQuery";

// A controllable read: each call returns a promise the test resolves.
function reads() {
  const pending: Array<(v: string) => void> = [];
  return {
    fn: () => new Promise<string>((resolve) => pending.push(resolve)),
    resolveLast: (v: string) => act(async () => pending[pending.length - 1](v)),
    calls: () => pending.length,
  };
}

function View({ fn, id, live }: { fn: () => Promise<string>; id: string; live: number }) {
  const q = useQuery(fn, [id], { refresh: live });
  return <p>{q.data ?? "loading"}</p>;
}

describe("useQuery", () => {
  it("keeps the data on screen while a live refresh runs, drops it for another object", async () => {
    const r = reads();
    const { rerender } = render(<View fn={r.fn} id="a" live={0} />);
    expect(screen.getByText("loading")).toBeTruthy();
    await r.resolveLast("a@0");
    expect(screen.getByText("a@0")).toBeTruthy();

    rerender(<View fn={r.fn} id="a" live={1} />); // the same object changed
    expect(r.calls()).toBe(2);
    expect(screen.getByText("a@0")).toBeTruthy(); // no loading flash
    await r.resolveLast("a@1");
    expect(screen.getByText("a@1")).toBeTruthy();

    rerender(<View fn={r.fn} id="b" live={1} />); // another object
    expect(screen.getByText("loading")).toBeTruthy();
    await r.resolveLast("b@1");
    expect(screen.getByText("b@1")).toBeTruthy();
  });
});
