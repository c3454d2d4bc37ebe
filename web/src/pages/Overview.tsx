// The fleet at a glance: counts, then every cluster, live from WatchFleet.
import { useMemo, useState } from "react";
import type { Fleet } from "../api/client";
import { useFleetSnapshot, useSession } from "../api/context";
import { Labels, StateBadge } from "../components/Badges";
import { ErrorBox } from "../components/ErrorBox";
import { ApprovalBadge, NewRegistrations } from "../components/Registrations";
import { Table, type Column } from "../components/Table";
import { ClusterState, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import { agoMs, clusterStateName, count, ms } from "../lib/format";
import { isNewRegistration, pendingApproval } from "../lib/registrations";
import { Link } from "../lib/router";
import { useNow } from "../lib/useNow";
import { useQuery } from "../lib/useQuery";

type StateFilter = "all" | "problems" | "skew" | "notready" | "noexport" | "approval" | "new" | keyof typeof stateByName;
const stateByName = {
  online: ClusterState.ONLINE,
  stale: ClusterState.STALE,
  offline: ClusterState.OFFLINE,
  pending: ClusterState.PENDING,
  revoked: ClusterState.REVOKED,
};

export function hasProblem(c: Cluster): boolean {
  return (
    pendingApproval(c) ||
    c.state !== ClusterState.ONLINE ||
    !c.configInSync ||
    c.versionSkew ||
    c.sinkErrors > 0n ||
    c.inventoriesNotReady > 0n ||
    c.bundles.some((b) => b.failedObjects > 0n)
  );
}

/** Older than this, or never: "no recent export". */
const exportStaleMs = 60 * 60 * 1000;

/**
 * When every sink of the cluster was last confirmed current (the oldest confirmation), or,
 * from an agent that reports none, its newest export.
 */
export function confirmedMs(c: Cluster): number | undefined {
  return ms(c.oldestConfirmTime) ?? ms(c.lastExportTime);
}

/**
 * A cluster that reported and whose sinks were not all confirmed current within
 * exportStaleMs, or never exported. A quiet cluster keeps confirming: it is not stale.
 */
export function noRecentExport(c: Cluster, now: number): boolean {
  if (!c.lastHeartbeat || c.state === ClusterState.REVOKED) return false;
  const t = confirmedMs(c);
  return t === undefined || now - t > exportStaleMs;
}

/**
 * Counts as config skew: not in sync, and part of the fleet. A revoked cluster is gone, and
 * nothing was sent to one pending approval.
 */
export function configSkew(c: Cluster): boolean {
  return !c.configInSync && c.state !== ClusterState.REVOKED && !pendingApproval(c);
}

export function matchesText(c: Cluster, text: string): boolean {
  const t = text.trim().toLowerCase();
  if (!t) return true;
  return t.split(/\s+/).every(
    (word) =>
      c.name.toLowerCase().includes(word) ||
      Object.entries(c.labels).some(([k, v]) => `${k}=${v}`.toLowerCase().includes(word)) ||
      c.agentVersion.toLowerCase().includes(word) ||
      c.kubernetesVersion.toLowerCase().includes(word),
  );
}

function Revisions({ c }: { c: Cluster }) {
  if (!c.bundles.length) return <span className="muted">no bundles</span>;
  return (
    <span className="labels">
      {c.bundles.map((b) => {
        const skewed = b.desiredRevision !== b.appliedRevision;
        return (
          <span
            key={b.bundle}
            className={skewed ? "revs skewed" : "revs"}
            title={`${b.bundle}: desired revision ${b.desiredRevision}, applied ${b.appliedRevision || "none"}${b.failedObjects ? `, ${b.failedObjects} failed objects` : ""}`}
          >
            {b.bundle} {b.appliedRevision.toString() || "–"}
            {skewed ? ` → ${b.desiredRevision}` : ""}
          </span>
        );
      })}
    </span>
  );
}

/**
 * WatchFleet does not send a cluster again for a heartbeat that changes nothing else, so the
 * heartbeat times in the live picture age; one ListClusters every 30 s refreshes them for the
 * whole fleet. A failed refresh keeps the last times (and the live ones) on screen.
 */
function useFreshHeartbeats(fleet: Fleet): { beats: ReadonlyMap<string, number>; error?: unknown } {
  const q = useQuery((signal) => fleet.listClusters({}, { signal }), [], { intervalMs: 30000 });
  const beats = useMemo(() => {
    const m = new Map<string, number>();
    for (const c of q.data?.clusters ?? []) {
      const t = ms(c.lastHeartbeat);
      if (t !== undefined) m.set(c.name, t);
    }
    return m;
  }, [q.data]);
  return { beats, error: q.error };
}

function newest(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.max(a, b);
}

export function Overview() {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const fresh = useFreshHeartbeats(fleet);
  const [text, setText] = useState("");
  const [state, setState] = useState<StateFilter>("all");
  // Re-renders every 5 s so that "5 s ago" keeps moving between fleet events; the texts
  // themselves read the clock when drawn, so a render caused by an event is exact.
  const now = useNow(5000);

  const clusters = useMemo(() => [...snap.clusters.values()], [snap.clusters]);
  const counts = useMemo(() => {
    const by = (s: ClusterState) => clusters.filter((c) => c.state === s).length;
    return {
      total: clusters.length,
      online: by(ClusterState.ONLINE),
      stale: by(ClusterState.STALE),
      offline: by(ClusterState.OFFLINE),
      pending: by(ClusterState.PENDING),
      revoked: by(ClusterState.REVOKED),
      configSkew: clusters.filter(configSkew).length,
      pendingApproval: clusters.filter(pendingApproval).length,
      newRegistrations: clusters.filter((c) => isNewRegistration(c, now)).length,
      notReady: clusters.filter((c) => c.inventoriesNotReady > 0n).length,
      versionSkew: clusters.filter((c) => c.versionSkew && !pendingApproval(c)).length,
      sinkErrors: clusters.filter((c) => c.sinkErrors > 0n).length,
    };
  }, [clusters, now]);

  const rows = useMemo(
    () =>
      clusters.filter((c) => {
        if (!matchesText(c, text)) return false;
        switch (state) {
          case "all":
            return true;
          case "problems":
            return hasProblem(c);
          case "skew":
            return configSkew(c);
          case "approval":
            return pendingApproval(c);
          case "new":
            return isNewRegistration(c, now);
          case "notready":
            return c.inventoriesNotReady > 0n;
          case "noexport":
            return noRecentExport(c, now);
          default:
            return c.state === stateByName[state];
        }
      }),
    [clusters, text, state, now],
  );
  const heartbeat = (c: Cluster) => newest(ms(c.lastHeartbeat), fresh.beats.get(c.name));

  const columns: Column<Cluster>[] = [
    { key: "name", header: "Cluster", sortValue: (c) => c.name, render: (c) => <Link to={`/clusters/${encodeURIComponent(c.name)}`}>{c.name}</Link> },
    {
      key: "state",
      header: "State",
      sortValue: (c) => clusterStateName[c.state],
      render: (c) => (
        <span className="labels">
          <StateBadge state={c.state} />
          <ApprovalBadge c={c} now={now} />
        </span>
      ),
    },
    { key: "labels", header: "Labels", render: (c) => <Labels labels={c.labels} /> },
    {
      key: "agent",
      header: "Agent",
      sortValue: (c) => c.agentVersion,
      render: (c) => (
        <span title={c.versionSkew ? "differs from the fleet's most common agent version" : undefined}>
          {c.agentVersion || "–"}
          {c.versionSkew ? <span className="skewmark"> ≠</span> : null}
        </span>
      ),
    },
    { key: "k8s", header: "Kubernetes", sortValue: (c) => c.kubernetesVersion, render: (c) => c.kubernetesVersion || "–" },
    {
      key: "revs",
      header: "Applied → desired",
      sortValue: (c) => (c.configInSync ? 1 : 0),
      render: (c) => <Revisions c={c} />,
    },
    {
      key: "inv",
      header: "Inventories",
      className: "num",
      sortValue: (c) => c.inventories,
      render: (c) => (
        <span>
          {count(c.inventories)}
          {c.inventoriesNotReady ? <span className="skewmark" title={`${c.inventoriesNotReady} not ready`}> ({count(c.inventoriesNotReady)} not ready)</span> : null}
        </span>
      ),
    },
    { key: "rows", header: "Rows", className: "num", sortValue: (c) => c.items, render: (c) => count(c.items) },
    {
      key: "export",
      header: "Confirmed",
      sortValue: (c) => confirmedMs(c) ?? 0,
      render: (c) => {
        const t = confirmedMs(c);
        if (t === undefined) return <span className="muted" title="no sink has reported a successful export">none</span>;
        const changed = ms(c.lastExportTime);
        const title = `every sink confirmed current at ${new Date(t).toLocaleString()}` +
          (changed === undefined ? "" : `; last change exported ${new Date(changed).toLocaleString()}`);
        return (
          <span className={now - t > exportStaleMs ? "skewmark" : undefined} title={title}>
            {agoMs(t)}
          </span>
        );
      },
    },
    {
      key: "errors",
      header: "Errors",
      className: "num",
      sortValue: (c) => Number(c.sinkErrors) + c.bundles.reduce((n, b) => n + Number(b.failedObjects), 0),
      render: (c) => {
        const failed = c.bundles.reduce((n, b) => n + Number(b.failedObjects), 0);
        if (!c.sinkErrors && !failed) return <span className="muted">0</span>;
        return (
          <span className="skewmark" title={`${c.sinkErrors} sinks failing, ${failed} objects not applied`}>
            {c.sinkErrors ? `${c.sinkErrors} sink${c.sinkErrors === 1n ? "" : "s"}` : ""}
            {c.sinkErrors && failed ? ", " : ""}
            {failed ? `${failed} object${failed === 1 ? "" : "s"}` : ""}
          </span>
        );
      },
    },
    {
      key: "heartbeat",
      header: "Heartbeat",
      sortValue: (c) => heartbeat(c) ?? 0,
      render: (c) => {
        const t = heartbeat(c);
        return <span title={t ? new Date(t).toLocaleString() : "never"}>{agoMs(t)}</span>;
      },
    },
  ];

  const countButton = (key: StateFilter, n: number, label: string, tone = "") => (
    <button type="button" className={`count ${n && tone ? tone : ""}`} aria-pressed={state === key} onClick={() => setState(state === key ? "all" : key)}>
      <span className="n">{count(n)}</span>
      <span className="t">{label}</span>
    </button>
  );

  return (
    <>
      <div className="topline">
        <h1>Fleet</h1>
      </div>
      <section className="counts" aria-label="Fleet counts">
        {countButton("all", counts.total, "clusters")}
        {countButton("online", counts.online, "online", "ok")}
        {countButton("stale", counts.stale, "stale", "warn")}
        {countButton("offline", counts.offline, "offline", "bad")}
        {countButton("pending", counts.pending, "pending", "warn")}
        {countButton("revoked", counts.revoked, "revoked", "bad")}
        {countButton("skew", counts.configSkew, "config skew", "warn")}
        {counts.pendingApproval ? countButton("approval", counts.pendingApproval, "pending approval", "warn") : null}
        {counts.newRegistrations ? countButton("new", counts.newRegistrations, "new registrations") : null}
        {countButton("notready", counts.notReady, "inventories not ready", "warn")}
        <div className={`count ${counts.versionSkew ? "warn" : ""}`}>
          <span className="n">{count(counts.versionSkew)}</span>
          <span className="t">version skew</span>
        </div>
        <div className={`count ${counts.sinkErrors ? "bad" : ""}`}>
          <span className="n">{count(counts.sinkErrors)}</span>
          <span className="t">with sink errors</span>
        </div>
      </section>
      <NewRegistrations clusters={clusters} now={now} more="choose new registrations above to list them all" />
      {snap.error && !snap.loaded ? <ErrorBox error={snap.error} /> : null}
      {fresh.error && snap.loaded ? <ErrorBox error={fresh.error} compact /> : null}
      <div className="filters" role="search">
        <input
          type="search"
          aria-label="Filter clusters"
          placeholder="Filter: name, label (env=prod) or version"
          value={text}
          onChange={(e) => setText(e.target.value)}
        />
        <label>
          State{" "}
          <select value={state} onChange={(e) => setState(e.target.value as StateFilter)}>
            <option value="all">all</option>
            <option value="problems">with problems</option>
            <option value="skew">config skew</option>
            <option value="approval">pending approval</option>
            <option value="new">new registrations (24 h)</option>
            <option value="notready">inventories not ready</option>
            <option value="noexport">no export for an hour</option>
            {Object.keys(stateByName).map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <span className="muted">
          {rows.length === clusters.length ? `${clusters.length} clusters` : `${rows.length} of ${clusters.length} clusters`}
        </span>
      </div>
      {!snap.loaded && !snap.error ? (
        <p className="muted">Loading the fleet…</p>
      ) : (
        <Table
          label="Clusters"
          rows={rows}
          columns={columns}
          rowKey={(c) => c.name}
          initialSort={{ key: "name" }}
          rowClass={(c) => (configSkew(c) || pendingApproval(c) ? "skew" : undefined)}
          empty={clusters.length ? "No cluster matches the filter." : "No cluster has registered yet. Create a bootstrap token on the Agents page."}
        />
      )}
    </>
  );
}
