// A cluster's heartbeat history (ListHeartbeats): a sparkline of its item count over time and
// one row per record, newest first. The hub records a heartbeat when one of these values
// changed, else at most one a minute, and keeps the last 100.
import { ClusterState, type HeartbeatRecord } from "../gen/kollect/fleet/v1/types_pb";
import { count, ms } from "../lib/format";
import { Table, type Column } from "./Table";

/** What the cluster's state at arrival says about a heartbeat. */
const arrival: Record<ClusterState, { text: string; cls: string }> = {
  [ClusterState.UNSPECIFIED]: { text: "unknown", cls: "" },
  [ClusterState.PENDING]: { text: "first heartbeat", cls: "state-pending" },
  [ClusterState.ONLINE]: { text: "online", cls: "state-online" },
  [ClusterState.STALE]: { text: "back after stale", cls: "state-stale" },
  [ClusterState.OFFLINE]: { text: "back after offline", cls: "state-offline" },
  [ClusterState.REVOKED]: { text: "revoked", cls: "state-revoked" },
};

/** Items over time as an SVG polyline, oldest left; nothing for fewer than two records. */
export function ItemsSparkline({ records, width = 320, height = 48 }: { records: HeartbeatRecord[]; width?: number; height?: number }) {
  const points = records
    .map((r) => ({ t: ms(r.time) ?? 0, items: Number(r.items) }))
    .sort((a, b) => a.t - b.t);
  if (points.length < 2) return null;
  const t0 = points[0].t;
  const span = Math.max(1, points[points.length - 1].t - t0);
  const lo = Math.min(...points.map((p) => p.items));
  const hi = Math.max(...points.map((p) => p.items));
  const pad = 3;
  const y = (v: number) => (hi === lo ? height / 2 : pad + (height - 2 * pad) * (1 - (v - lo) / (hi - lo)));
  const x = (t: number) => pad + ((width - 2 * pad) * (t - t0)) / span;
  const path = points.map((p) => `${x(p.t).toFixed(1)},${y(p.items).toFixed(1)}`).join(" ");
  const first = points[0].items;
  const last = points[points.length - 1].items;
  const label = `Items over time: ${count(first)} to ${count(last)} (lowest ${count(lo)}, highest ${count(hi)})`;
  return (
    <figure className="sparkline">
      <svg role="img" aria-label={label} width={width} height={height} viewBox={`0 0 ${width} ${height}`}>
        <polyline points={path} fill="none" stroke="currentColor" strokeWidth="1.5" />
      </svg>
      <figcaption className="muted">
        items {count(first)} → {count(last)}, {new Date(points[0].t).toLocaleString()} to now
      </figcaption>
    </figure>
  );
}

export function HeartbeatHistory({ records }: { records: HeartbeatRecord[] }) {
  if (!records.length) return <p className="muted">No heartbeat recorded yet.</p>;
  // records are newest first: a row's predecessor in time is the next one.
  const older = new Map(records.map((r, i) => [r, records[i + 1]]));
  const columns: Column<HeartbeatRecord>[] = [
    {
      key: "time",
      header: "Received",
      render: (r) => {
        const t = ms(r.time);
        return t ? new Date(t).toLocaleString() : "–";
      },
    },
    {
      key: "state",
      header: "Arrived",
      render: (r) => {
        const a = arrival[r.state] ?? arrival[ClusterState.UNSPECIFIED];
        return <span className={`badge ${a.cls}`}>{a.text}</span>;
      },
    },
    { key: "agent", header: "Agent", render: (r) => r.agentVersion || "–" },
    {
      key: "config",
      header: "Applied config",
      render: (r) => {
        const prev = older.get(r);
        const changed = prev !== undefined && prev.appliedConfigDigest !== r.appliedConfigDigest;
        return (
          <span className={changed ? "mono skewmark" : "mono"} title={changed ? `changed from ${prev.appliedConfigDigest || "none"}` : r.appliedConfigDigest}>
            {r.appliedConfigDigest.slice(7, 19) || "none"}
          </span>
        );
      },
    },
    {
      key: "inv",
      header: "Inventories",
      className: "num",
      render: (r) => (
        <>
          {count(r.inventories)}
          {r.inventoriesNotReady ? <span className="skewmark"> ({count(r.inventoriesNotReady)} not ready)</span> : null}
        </>
      ),
    },
    { key: "items", header: "Items", className: "num", render: (r) => count(r.items) },
    {
      key: "sinks",
      header: "Sink errors",
      className: "num",
      render: (r) => (r.sinkErrors ? <span className="skewmark">{count(r.sinkErrors)}</span> : <span className="muted">0</span>),
    },
  ];
  return (
    <>
      <ItemsSparkline records={records} />
      <Table label="Heartbeat history" rows={records} columns={columns} rowKey={(r) => `${ms(r.time)}-${r.state}`} pageSizes={[20, 100]} />
    </>
  );
}
