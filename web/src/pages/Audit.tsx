// The audit log, newest first, a page of 100 at a time.
import { useState } from "react";
import { useSession } from "../api/context";
import { ErrorBox } from "../components/ErrorBox";
import { absolute } from "../lib/format";
import { useQuery } from "../lib/useQuery";

export function Audit() {
  const { fleet } = useSession();
  const [before, setBefore] = useState<bigint[]>([0n]);
  const cursor = before[before.length - 1];
  const q = useQuery((signal) => fleet.listAuditEvents({ limit: 100, beforeId: cursor }, { signal }), [cursor]);
  const events = q.data?.events ?? [];
  return (
    <>
      <h1>Audit log</h1>
      {q.error ? <ErrorBox error={q.error} onRetry={q.reload} /> : null}
      <div className="table-wrap">
        <table aria-label="Audit events">
          <thead>
            <tr>
              <th>Time</th>
              <th>Actor</th>
              <th>Action</th>
              <th>Target</th>
              <th>Detail</th>
            </tr>
          </thead>
          <tbody>
            {events.map((e) => (
              <tr key={e.id.toString()}>
                <td>{absolute(e.time)}</td>
                <td>{e.actor}</td>
                <td>{e.action}</td>
                <td className="mono">{e.target}</td>
                <td>{e.detail}</td>
              </tr>
            ))}
            {!events.length ? (
              <tr>
                <td colSpan={5} className="muted">
                  {q.loading ? "Loading…" : "No event."}
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </div>
      <nav className="pager" aria-label="Audit pages">
        <button type="button" disabled={before.length === 1} onClick={() => setBefore(before.slice(0, -1))}>
          Newer
        </button>
        <button type="button" disabled={events.length < 100} onClick={() => setBefore([...before, events[events.length - 1].id])}>
          Older
        </button>
      </nav>
    </>
  );
}
