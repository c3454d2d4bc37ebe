import { fireEvent, render, screen, within } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { Table, type Column } from "./Table";

interface Row {
  name: string;
  n: number;
}

const columns: Column<Row>[] = [
  { key: "name", header: "Name", sortValue: (r) => r.name, render: (r) => r.name },
  { key: "n", header: "N", sortValue: (r) => r.n, render: (r) => String(r.n) },
];

const rows: Row[] = Array.from({ length: 1000 }, (_, i) => ({ name: `cluster-${i}`, n: (i * 7) % 1000 }));

function bodyRows() {
  return within(screen.getByRole("table", { name: "Clusters" })).getAllByRole("row").slice(1);
}

describe("Table", () => {
  it("renders one page of a thousand rows, sorted naturally", () => {
    render(<Table label="Clusters" rows={rows} columns={columns} rowKey={(r) => r.name} initialSort={{ key: "name" }} />);
    expect(bodyRows()).toHaveLength(50);
    expect(bodyRows()[0].textContent).toContain("cluster-0");
    expect(bodyRows()[2].textContent).toContain("cluster-2"); // numeric order, not cluster-10
    expect(screen.getByText("1–50 of 1000")).toBeTruthy();
  });

  it("pages and sorts with real buttons", () => {
    render(<Table label="Clusters" rows={rows} columns={columns} rowKey={(r) => r.name} initialSort={{ key: "name" }} />);
    fireEvent.click(screen.getByRole("button", { name: "Last page" }));
    expect(screen.getByText("951–1000 of 1000")).toBeTruthy();
    expect(bodyRows()[49].textContent).toContain("cluster-999");

    fireEvent.click(screen.getByRole("button", { name: "N" }));
    expect(screen.getByText("1–50 of 1000")).toBeTruthy(); // sorting goes back to the first page
    expect(bodyRows()[0].textContent).toContain("0");
    expect(screen.getByRole("columnheader", { name: "N" }).getAttribute("aria-sort")).toBe("ascending");
    fireEvent.click(screen.getByRole("button", { name: "N" }));
    expect(bodyRows()[0].textContent).toContain("999");
    expect(screen.getByRole("columnheader", { name: "N" }).getAttribute("aria-sort")).toBe("descending");
  });

  it("changes the page size", () => {
    render(<Table label="Clusters" rows={rows} columns={columns} rowKey={(r) => r.name} />);
    fireEvent.change(screen.getByLabelText(/Rows per page/), { target: { value: "250" } });
    expect(bodyRows()).toHaveLength(250);
  });

  it("says so when there is nothing", () => {
    render(<Table label="Clusters" rows={[]} columns={columns} rowKey={(r) => r.name} empty="No cluster yet." />);
    expect(screen.getByText("No cluster yet.")).toBeTruthy();
    expect(screen.queryByRole("navigation")).toBeNull();
  });
});
