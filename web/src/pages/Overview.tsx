// The fleet at a glance: counts, then every cluster, live from WatchFleet.
import { useMemo, useState } from "react";
import { useFleetSnapshot, useSession } from "../api/context";
import { Labels, StateBadge } from "../components/Badges";
import { ErrorBox } from "../components/ErrorBox";
import { Table, type Column } from "../components/Table";
import { ClusterState, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import { agoMs, clusterStateName, count, ms } from "../lib/format";
import { Link } from "../lib/router";
import { StatusCache, useClusterStatus } from "../lib/statusCache";
import { useNow } from "../lib/useNow";

type StateFilter = "all" | "problems" | "skew" | keyof typeof stateByName;
const stateByName = {
  online: ClusterState.ONLINE,
  stale: ClusterState.STALE,
  offline: ClusterState.OFFLINE,
  pending: ClusterState.PENDING,
  revoked: ClusterState.REVOKED,
};

export function hasProblem(c: Cluster): boolean {
  return (
    c.state !== ClusterState.ONLINE ||
    !c.configInSync ||
    c.versionSkew ||
    c.sinkErrors > 0n ||
    c.bundles.some((b) => b.failedObjects > 0n)
  );
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

/** Inventories, rows and last export come from the cluster's last heartbeat (GetCluster). */
function StatusCell({ cache, c, what }: { cache: StatusCache; c: Cluster; what: "inv" | "rows" | "export" }) {
  const e = useClusterStatus(cache, c.name, ms(c.lastHeartbeat));
  if (e.error && !e.data) return <ErrorBox error={e.error} compact />;
  const st = e.data?.status;
  if (!st) return <span className="muted">{e.inFlight || !e.fetchedAt ? "…" : "–"}</span>;
  if (what === "inv") {
    const notReady = st.inventories.filter((i) => i.conditions.some((k) => k.type === "Ready" && k.status !== "True")).length;
    return (
      <span>
        {st.inventories.length}
        {notReady ? <span className="skewmark" title={`${notReady} not ready`}> ({notReady} not ready)</span> : null}
      </span>
    );
  }
  if (what === "rows") return <span>{count(st.inventories.reduce((n, i) => n + i.itemCount, 0n))}</span>;
  const last = st.sinks.reduce<number | undefined>((m, s) => {
    const t = ms(s.lastSuccessTime);
    return t !== undefined && (m === undefined || t > m) ? t : m;
  }, undefined);
  if (!st.sinks.length) return <span className="muted">no sinks</span>;
  return <span title={last ? new Date(last).toLocaleString() : "never"}>{agoMs(last)}</span>;
}

/**
 * WatchFleet sends a cluster again only when something visible changes, not on every
 * heartbeat; the status fetched for the rows on screen carries a newer one.
 */
function HeartbeatCell({ cache, c }: { cache: StatusCache; c: Cluster }) {
  const e = useClusterStatus(cache, c.name, ms(c.lastHeartbeat));
  const live = ms(c.lastHeartbeat);
  const fetched = ms(e.data?.cluster?.lastHeartbeat);
  const t = live === undefined || (fetched !== undefined && fetched > live) ? fetched : live;
  return <span title={t ? new Date(t).toLocaleString() : "never"}>{agoMs(t)}</span>;
}

export function Overview() {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const cache = useMemo(() => new StatusCache(fleet), [fleet]);
  const [text, setText] = useState("");
  const [state, setState] = useState<StateFilter>("all");
  useNow(5000); // keeps "5 s ago" moving between fleet events

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
      configSkew: clusters.filter((c) => !c.configInSync && c.state !== ClusterState.REVOKED).length,
      versionSkew: clusters.filter((c) => c.versionSkew).length,
      sinkErrors: clusters.filter((c) => c.sinkErrors > 0n).length,
    };
  }, [clusters]);

  const rows = useMemo(
    () =>
      clusters.filter(
        (c) =>
          matchesText(c, text) &&
          (state === "all" ||
            (state === "problems"
              ? hasProblem(c)
              : state === "skew"
                ? !c.configInSync && c.state !== ClusterState.REVOKED
                : c.state === stateByName[state])),
      ),
    [clusters, text, state],
  );

  const columns: Column<Cluster>[] = [
    { key: "name", header: "Cluster", sortValue: (c) => c.name, render: (c) => <Link to={`/clusters/${encodeURIComponent(c.name)}`}>{c.name}</Link> },
    { key: "state", header: "State", sortValue: (c) => clusterStateName[c.state], render: (c) => <StateBadge state={c.state} /> },
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
    { key: "inv", header: "Inventories", className: "num", render: (c) => <StatusCell cache={cache} c={c} what="inv" /> },
    { key: "rows", header: "Rows", className: "num", render: (c) => <StatusCell cache={cache} c={c} what="rows" /> },
    { key: "export", header: "Last export", render: (c) => <StatusCell cache={cache} c={c} what="export" /> },
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
      sortValue: (c) => ms(c.lastHeartbeat) ?? 0,
      render: (c) => <HeartbeatCell cache={cache} c={c} />,
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
        <div className={`count ${counts.versionSkew ? "warn" : ""}`}>
          <span className="n">{count(counts.versionSkew)}</span>
          <span className="t">version skew</span>
        </div>
        <div className={`count ${counts.sinkErrors ? "bad" : ""}`}>
          <span className="n">{count(counts.sinkErrors)}</span>
          <span className="t">with sink errors</span>
        </div>
      </section>
      {snap.error && !snap.loaded ? <ErrorBox error={snap.error} /> : null}
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
          rowClass={(c) => (!c.configInSync && c.state !== ClusterState.REVOKED ? "skew" : undefined)}
          empty={clusters.length ? "No cluster matches the filter." : "No cluster has registered yet. Create a bootstrap token on the Agents page."}
        />
      )}
    </>
  );
}
