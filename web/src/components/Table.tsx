// A sortable, paginated table: it renders one page of rows at a time, so 1,000 or 10,000
// clusters cost the same to draw as 50. Sort headers and pager are real buttons.
import { useEffect, useMemo, useState, type ReactNode } from "react";

export interface Column<T> {
  key: string;
  header: ReactNode;
  render: (row: T) => ReactNode;
  /** Makes the column sortable. */
  sortValue?: (row: T) => string | number | bigint;
  className?: string;
}

export interface TableProps<T> {
  rows: T[];
  columns: Column<T>[];
  rowKey: (row: T) => string;
  /** Accessible name of the table. */
  label: string;
  initialSort?: { key: string; desc?: boolean };
  pageSizes?: number[];
  rowClass?: (row: T) => string | undefined;
  empty?: ReactNode;
}

function compare(a: string | number | bigint, b: string | number | bigint): number {
  if (typeof a === "string" && typeof b === "string") return a.localeCompare(b, undefined, { numeric: true });
  return a < b ? -1 : a > b ? 1 : 0;
}

export function Table<T>({ rows, columns, rowKey, label, initialSort, pageSizes = [50, 100, 250], rowClass, empty }: TableProps<T>) {
  const [sort, setSort] = useState(initialSort);
  const [pageSize, setPageSize] = useState(pageSizes[0]);
  const [page, setPage] = useState(0);

  const sorted = useMemo(() => {
    const col = columns.find((c) => c.key === sort?.key);
    if (!col?.sortValue) return rows;
    const sv = col.sortValue;
    const out = [...rows].sort((a, b) => compare(sv(a), sv(b)) || rowKey(a).localeCompare(rowKey(b)));
    return sort?.desc ? out.reverse() : out;
  }, [rows, columns, sort, rowKey]);

  const pages = Math.max(1, Math.ceil(sorted.length / pageSize));
  useEffect(() => {
    if (page >= pages) setPage(pages - 1);
  }, [page, pages]);
  const shown = sorted.slice(page * pageSize, page * pageSize + pageSize);

  const toggle = (key: string) => {
    setSort((s) => (s?.key === key ? { key, desc: !s.desc } : { key, desc: false }));
    setPage(0);
  };

  return (
    <div className="table-wrap">
      <table aria-label={label}>
        <thead>
          <tr>
            {columns.map((c) => {
              const active = sort?.key === c.key;
              return (
                <th
                  key={c.key}
                  className={c.className}
                  scope="col"
                  aria-sort={active ? (sort?.desc ? "descending" : "ascending") : undefined}
                >
                  {c.sortValue ? (
                    <button type="button" className="sort" onClick={() => toggle(c.key)}>
                      {c.header}
                      <span aria-hidden="true">{active ? (sort?.desc ? " ▼" : " ▲") : ""}</span>
                    </button>
                  ) : (
                    c.header
                  )}
                </th>
              );
            })}
          </tr>
        </thead>
        <tbody>
          {shown.map((row) => (
            <tr key={rowKey(row)} className={rowClass?.(row)}>
              {columns.map((c) => (
                <td key={c.key} className={c.className}>
                  {c.render(row)}
                </td>
              ))}
            </tr>
          ))}
          {!shown.length && (
            <tr>
              <td colSpan={columns.length} className="muted">
                {empty ?? "Nothing to show."}
              </td>
            </tr>
          )}
        </tbody>
      </table>
      {sorted.length > pageSizes[0] && (
        <nav className="pager" aria-label={`${label} pages`}>
          <button type="button" onClick={() => setPage(0)} disabled={page === 0} aria-label="First page">
            «
          </button>
          <button type="button" onClick={() => setPage(page - 1)} disabled={page === 0} aria-label="Previous page">
            ‹
          </button>
          <span>
            {page * pageSize + 1}–{Math.min(sorted.length, (page + 1) * pageSize)} of {sorted.length}
          </span>
          <button type="button" onClick={() => setPage(page + 1)} disabled={page >= pages - 1} aria-label="Next page">
            ›
          </button>
          <button type="button" onClick={() => setPage(pages - 1)} disabled={page >= pages - 1} aria-label="Last page">
            »
          </button>
          <label>
            Rows per page{" "}
            <select
              value={pageSize}
              onChange={(e) => {
                setPageSize(Number(e.target.value));
                setPage(0);
              }}
            >
              {pageSizes.map((n) => (
                <option key={n} value={n}>
                  {n}
                </option>
              ))}
            </select>
          </label>
        </nav>
      )}
    </div>
  );
}
