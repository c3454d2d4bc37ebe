// Every bundle, live from WatchFleet.
import { useMemo } from "react";
import { useCan, useFleetSnapshot } from "../api/context";
import { Table, type Column } from "../components/Table";
import { Role, type Bundle } from "../gen/kollect/fleet/v1/types_pb";
import { absolute, ago, ms } from "../lib/format";
import { Link } from "../lib/router";
import { formatSelector } from "../lib/selector";

export function Bundles() {
  const snap = useFleetSnapshot();
  const canWrite = useCan(Role.OPERATOR);
  const bundles = useMemo(() => [...snap.bundles.values()], [snap.bundles]);
  const columns: Column<Bundle>[] = [
    { key: "name", header: "Bundle", sortValue: (b) => b.name, render: (b) => <Link to={`/bundles/${encodeURIComponent(b.name)}`}>{b.name}</Link> },
    { key: "desc", header: "Description", render: (b) => b.description || <span className="muted">–</span> },
    { key: "latest", header: "Latest", className: "num", sortValue: (b) => b.latestRevision, render: (b) => b.latestRevision.toString() },
    {
      key: "stable",
      header: "Stable",
      className: "num",
      sortValue: (b) => b.stableRevision,
      render: (b) => (
        <span className={b.stableRevision !== b.latestRevision ? "skewmark" : undefined} title="the revision newly registered clusters get">
          {b.stableRevision ? b.stableRevision.toString() : "none"}
        </span>
      ),
    },
    {
      key: "rollout",
      header: "Rollout",
      render: (b) => (b.activeRolloutId ? <Link to={`/rollouts/${b.activeRolloutId}`}>#{b.activeRolloutId.toString()} active</Link> : <span className="muted">none</span>),
    },
    { key: "sel", header: "Cluster selector", render: (b) => <code>{formatSelector(b.clusterSelector) || "every cluster"}</code> },
    { key: "clusters", header: "Clusters", className: "num", sortValue: (b) => b.selectedClusters, render: (b) => b.selectedClusters.toString() },
    { key: "updated", header: "Updated", sortValue: (b) => ms(b.updatedAt) ?? 0, render: (b) => <span title={absolute(b.updatedAt)}>{ago(b.updatedAt)}</span> },
  ];
  return (
    <>
      <div className="topline">
        <h1>Bundles</h1>
        {canWrite ? (
          <Link to="/bundles/new" className="buttonlike">
            New bundle
          </Link>
        ) : null}
      </div>
      <Table
        label="Bundles"
        rows={bundles}
        columns={columns}
        rowKey={(b) => b.name}
        initialSort={{ key: "name" }}
        empty={snap.loaded ? "No bundle yet." : "Loading…"}
      />
    </>
  );
}
