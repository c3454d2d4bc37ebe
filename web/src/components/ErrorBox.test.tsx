import { Code, ConnectError } from "@connectrpc/connect";
import { render, screen } from "@testing-library/react";
import { describe, expect, it, vi } from "vitest";
import { ErrorBoundary } from "./ErrorBoundary";
import { ErrorBox } from "./ErrorBox";

describe("ErrorBox", () => {
  it("turns a Connect error into a sentence and keeps the hub's lines", () => {
    const err = new ConnectError("invalid bundle:\nKollectProfile team-a/web: bad", Code.InvalidArgument);
    render(<ErrorBox error={err} />);
    expect(screen.getByRole("alert").textContent).toContain("The hub refused the request");
    expect(screen.getByText(/KollectProfile team-a\/web: bad/).textContent).toBe("invalid bundle:\nKollectProfile team-a/web: bad");
  });

  it("names a missing role plainly", () => {
    render(<ErrorBox error={new ConnectError("ApplyBundle needs role operator", Code.PermissionDenied)} />);
    expect(screen.getByRole("alert").textContent).toContain("Your token's role does not allow this");
  });
});

describe("ErrorBoundary", () => {
  it("replaces only the part that failed", () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const Broken = () => {
      throw new Error("cannot render this row");
    };
    render(
      <div>
        <p>the rest of the page</p>
        <ErrorBoundary what="this panel">
          <Broken />
        </ErrorBoundary>
      </div>,
    );
    expect(screen.getByText("the rest of the page")).toBeTruthy();
    expect(screen.getByText(/Something in this panel failed to display/)).toBeTruthy();
    expect(screen.getByText("cannot render this row")).toBeTruthy();
  });
});
