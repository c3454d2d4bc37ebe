// Rollouts: the active ones live from WatchFleet, and the history from ListRollouts.
import { useMemo } from "react";
import { useCan, useFleetSnapshot, useSession } from "../api/context";
import { ErrorBox } from "../components/ErrorBox";
import { PhaseBadge, isActive } from "../components/RolloutParts";
import { Table, type Column } from "../components/Table";
import type { Rollout } from "../gen/kollect/fleet/v1/rollout_pb";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import { absolute, ago, ms } from "../lib/format";
import { Link } from "../lib/router";
import { useQuery } from "../lib/useQuery";

function progress(r: Rollout): string {
  const total = r.waves.reduce((n, w) => n + Number(w.clustersTotal), 0);
  const healthy = r.waves.reduce((n, w) => n + Number(w.clustersHealthy), 0);
  const failed = r.waves.reduce((n, w) => n + Number(w.clustersFailed), 0);
  return `${healthy}/${total} healthy${failed ? `, ${failed} failed` : ""}`;
}

export function Rollouts() {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const canWrite = useCan(Role.OPERATOR);
  const liveKey = [...snap.rollouts.values()].map((r) => `${r.id}:${r.phase}:${r.currentWave}`).join(",");
  const history = useQuery((signal) => fleet.listRollouts({ limit: 200 }, { signal }), [], { intervalMs: 15000, refresh: liveKey });

  // Live events are newer than the last list: they win.
  const rows = useMemo(() => {
    const by = new Map<string, Rollout>();
    for (const r of history.data?.rollouts ?? []) by.set(r.id.toString(), r);
    for (const r of snap.rollouts.values()) by.set(r.id.toString(), r);
    return [...by.values()];
  }, [history.data, snap.rollouts]);
  const active = rows.filter(isActive);

  const columns: Column<Rollout>[] = [
    { key: "id", header: "Rollout", sortValue: (r) => r.id, render: (r) => <Link to={`/rollouts/${r.id}`}>#{r.id.toString()}</Link> },
    { key: "bundle", header: "Bundle", sortValue: (r) => r.bundle, render: (r) => <Link to={`/bundles/${encodeURIComponent(r.bundle)}`}>{r.bundle}</Link> },
    {
      key: "revs",
      header: "Revisions",
      render: (r) => (
        <span>
          {r.fromRevision ? r.fromRevision.toString() : "none"} → {r.toRevision.toString()}
          {r.rollbackOf ? <span className="muted"> (rollback of #{r.rollbackOf.toString()})</span> : null}
        </span>
      ),
    },
    { key: "phase", header: "Phase", sortValue: (r) => r.phase, render: (r) => <PhaseBadge phase={r.phase} /> },
    { key: "wave", header: "Wave", render: (r) => (r.waves.length ? `${r.waves[r.currentWave]?.name ?? "–"} of ${r.waves.length}` : "–") },
    { key: "progress", header: "Progress", render: progress },
    { key: "by", header: "By", render: (r) => r.createdBy },
    { key: "created", header: "Started", sortValue: (r) => ms(r.createdAt) ?? 0, render: (r) => <span title={absolute(r.createdAt)}>{ago(r.createdAt)}</span> },
  ];

  return (
    <>
      <div className="topline">
        <h1>Rollouts</h1>
        {canWrite ? (
          <Link to="/rollouts/new" className="buttonlike">
            Start rollout
          </Link>
        ) : null}
      </div>
      {history.error ? <ErrorBox error={history.error} onRetry={history.reload} /> : null}
      <h2>Active</h2>
      {active.length ? (
        <ul aria-label="Active rollouts">
          {active.map((r) => (
            <li key={r.id.toString()}>
              <Link to={`/rollouts/${r.id}`}>
                #{r.id.toString()} {r.bundle} {r.fromRevision.toString()} → {r.toRevision.toString()}
              </Link>{" "}
              <PhaseBadge phase={r.phase} /> {progress(r)} {r.message ? <span className="muted">— {r.message}</span> : null}
            </li>
          ))}
        </ul>
      ) : (
        <p className="muted">No rollout is active.</p>
      )}
      <h2>History</h2>
      <Table
        label="Rollout history"
        rows={rows}
        columns={columns}
        rowKey={(r) => r.id.toString()}
        initialSort={{ key: "id", desc: true }}
        empty={history.loading ? "Loading…" : "No rollout yet. Apply a bundle revision with hold, then start one."}
      />
    </>
  );
}
