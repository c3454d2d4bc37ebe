// The export-freshness matrix: one row per cluster, one column per sink (kind, namespace and
// name: two sinks of one name in two namespaces are two columns), each cell coloured by the age
// of the last successful export and by the class of the last error. The cells of an offline
// cluster are greyed out and give the age as of its last heartbeat: nothing newer is known. A
// sink an inventory names that the cluster does not have is an error cell saying "sink not
// found". A cell opens the cause: the full error, when the sink last worked, and a link to the
// cluster.
import { useMemo, useState } from "react";
import { useFleetSnapshot, useSession } from "../api/context";
import { ErrorClassBadge, StateBadge } from "../components/Badges";
import { ErrorBox } from "../components/ErrorBox";
import { Table, type Column } from "../components/Table";
import { ClusterState, SinkErrorClass, type Cluster, type SinkFreshness } from "../gen/kollect/fleet/v1/types_pb";
import { absolute, agoMs, durationMsOf, errorClassName, humanDuration, ms } from "../lib/format";
import { Link } from "../lib/router";
import { useQuery } from "../lib/useQuery";

export type AgeClass = "fresh" | "aging" | "old" | "ancient" | "never";

/** Age buckets: under 5 minutes, under an hour, under a day, older; "never" without a success. */
export function ageClass(lagMs: number | undefined): AgeClass {
  if (lagMs === undefined) return "never";
  if (lagMs < 5 * 60_000) return "fresh";
  if (lagMs < 3600_000) return "aging";
  if (lagMs < 86400_000) return "old";
  return "ancient";
}

export function cellClass(f: SinkFreshness): string {
  if (f.errorClass !== SinkErrorClass.UNSPECIFIED) return `cls-${errorClassName[f.errorClass].replace(" ", "-")}`;
  return `age-${ageClass(lagOf(f))}`;
}

function lagOf(f: SinkFreshness): number | undefined {
  return ms(f.lastSuccessTime) === undefined ? undefined : durationMsOf(f.lag);
}

export function sinkKey(f: SinkFreshness): string {
  return `${f.sinkKind}/${f.sinkNamespace}/${f.sinkName}`;
}

/** "team-a/warehouse": what a column and a cell are named by (the kind goes under it). */
export function sinkLabel(f: SinkFreshness): string {
  return f.sinkNamespace ? `${f.sinkNamespace}/${f.sinkName}` : f.sinkName;
}

/** "KollectDatabaseSink" → "database". */
export function sinkFamily(kind: string): string {
  return kind.replace(/^Kollect/, "").replace(/Sink$/, "").toLowerCase() || kind;
}

/**
 * For a cell of an offline cluster, its age when the cluster last reported (the hub's lag
 * keeps growing with the hub's clock, but nothing after the last heartbeat is known); undefined
 * for a cluster that is not offline.
 */
export function offlineAge(f: SinkFreshness, c: Cluster | undefined): { ageAtBeat?: number; beat?: number } | undefined {
  if (!c || c.state !== ClusterState.OFFLINE) return undefined;
  const beat = ms(c.lastHeartbeat);
  const confirmed = ms(f.lastConfirmTime) ?? ms(f.lastSuccessTime);
  return { beat, ageAtBeat: beat !== undefined && confirmed !== undefined ? Math.max(0, beat - confirmed) : undefined };
}

interface Row {
  cluster: string;
  cells: Map<string, SinkFreshness>;
}

function Cause({ f, cluster, onClose }: { f: SinkFreshness; cluster: Cluster | undefined; onClose: () => void }) {
  const lag = lagOf(f);
  const off = offlineAge(f, cluster);
  return (
    <section className="panel drawer" aria-label="Export cause" aria-live="polite">
      <div className="topline">
        <h2>
          {f.sinkKind} {f.sinkNamespace}/{f.sinkName} on {f.cluster}
        </h2>
        <button type="button" onClick={onClose}>
          Close
        </button>
      </div>
      {off ? (
        <p className="notice" data-testid="offline-note">
          {f.cluster} is offline: its last heartbeat was {agoMs(off.beat)}. What follows is what it reported then
          {off.ageAtBeat !== undefined ? `, when this sink's export was ${humanDuration(off.ageAtBeat)} old` : ""}; nothing newer is known.
        </p>
      ) : null}
      <dl className="kv">
        <dt>Sink type</dt>
        <dd>{f.sinkType}</dd>
        <dt>Last confirmed current</dt>
        <dd>
          {f.lastConfirmTime ? absolute(f.lastConfirmTime) : "not reported: the age is the last export's"}
          {lag !== undefined ? ` (${humanDuration(lag)} before the matrix was built)` : ""}
        </dd>
        <dt>Last change exported</dt>
        <dd>{absolute(f.lastSuccessTime)}</dd>
        <dt>Error class</dt>
        <dd>{f.errorClass === SinkErrorClass.UNSPECIFIED ? "no error: the last attempt succeeded" : <ErrorClassBadge cls={f.errorClass} />}</dd>
        {f.lastError ? (
          <>
            <dt>Last error</dt>
            <dd>
              <pre className="code" data-testid="cause">
                {f.lastError}
              </pre>
            </dd>
          </>
        ) : null}
        <dt>What to do</dt>
        <dd>
          {f.sinkNotFound
            ? "An inventory names this sink and the cluster has no such sink object, so nothing is exported to it: create the sink, or fix the inventory's reference (its Degraded condition says SinkInvalid)."
            : f.errorClass === SinkErrorClass.TERMINAL
            ? "A terminal error does not heal by retrying: fix the sink's configuration or its credentials Secret in the cluster."
            : f.errorClass === SinkErrorClass.CIRCUIT_OPEN
              ? "The circuit breaker paused exports after repeated failures; the agent probes the sink again when it closes."
              : f.errorClass === SinkErrorClass.TRANSIENT
                ? "The agent retries with backoff; look at the sink server if the error persists."
                : lag === undefined
                  ? "This sink has never received an export from this cluster."
                  : "Nothing: exports reach this sink."}
        </dd>
      </dl>
      <p>
        <Link to={`/clusters/${encodeURIComponent(f.cluster)}`}>Open cluster {f.cluster}</Link>
      </p>
    </section>
  );
}

export function Freshness() {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const q = useQuery((signal) => fleet.getFleetHealth({}, { signal }), [], { intervalMs: 5000 });
  const [selected, setSelected] = useState<SinkFreshness | null>(null);
  const [onlyProblems, setOnlyProblems] = useState(false);
  const [text, setText] = useState("");

  const { rows, sinks } = useMemo(() => {
    const byCluster = new Map<string, Row>();
    const sinks = new Map<string, SinkFreshness>();
    for (const f of q.data?.exportFreshness ?? []) {
      let r = byCluster.get(f.cluster);
      if (!r) byCluster.set(f.cluster, (r = { cluster: f.cluster, cells: new Map() }));
      r.cells.set(sinkKey(f), f);
      // The column is named after a cell that knows the sink's type: a missing sink has none.
      const seen = sinks.get(sinkKey(f));
      if (!seen || (!seen.sinkType && f.sinkType)) sinks.set(sinkKey(f), f);
    }
    const sortedSinks = [...sinks.values()].sort((a, b) => sinkKey(a).localeCompare(sinkKey(b)));
    return { rows: [...byCluster.values()], sinks: sortedSinks };
  }, [q.data]);

  const shown = rows.filter(
    (r) =>
      r.cluster.includes(text.trim()) &&
      (!onlyProblems || [...r.cells.values()].some((f) => f.errorClass !== SinkErrorClass.UNSPECIFIED || ageClass(lagOf(f)) !== "fresh")),
  );

  const columns: Column<Row>[] = [
    {
      key: "cluster",
      header: "Cluster",
      sortValue: (r) => r.cluster,
      render: (r) => {
        const c = snap.clusters.get(r.cluster);
        return (
          <span className="labels">
            <Link to={`/clusters/${encodeURIComponent(r.cluster)}`}>{r.cluster}</Link>
            {c ? <StateBadge state={c.state} /> : null}
          </span>
        );
      },
    },
    ...sinks.map(
      (s): Column<Row> => ({
        key: sinkKey(s),
        header: (
          <span title={`${s.sinkKind} ${sinkLabel(s)}`} data-sink={sinkKey(s)}>
            {sinkLabel(s)}
            <br />
            <span className="muted">
              {sinkFamily(s.sinkKind)} · {s.sinkType || "?"}
            </span>
          </span>
        ),
        className: "cell",
        sortValue: (r) => {
          const f = r.cells.get(sinkKey(s));
          return f ? (lagOf(f) ?? Number.MAX_SAFE_INTEGER) : -1;
        },
        render: (r) => {
          const f = r.cells.get(sinkKey(s));
          if (!f) return <span className="muted cellbtn">–</span>;
          const lag = lagOf(f);
          const err = f.errorClass ? `, ${errorClassName[f.errorClass]} error` : "";
          const off = offlineAge(f, snap.clusters.get(r.cluster));
          const pressed = selected !== null && sinkKey(selected) === sinkKey(f) && selected.cluster === f.cluster;
          if (f.sinkNotFound) {
            // No export and no age to show: the reference itself is the error.
            return (
              <button
                type="button"
                className={`cellbtn cell-notfound ${cellClass(f)}`}
                title={f.lastError}
                aria-label={`${f.cluster} ${sinkLabel(f)}: sink not found`}
                aria-pressed={pressed}
                onClick={() => setSelected(f)}
              >
                sink not found
              </button>
            );
          }
          if (off) {
            // Offline: the age the cluster last reported, not one that pretends to be current.
            const age = lag === undefined ? "never exported" : off.ageAtBeat === undefined ? "age unknown" : `${humanDuration(off.ageAtBeat)} old`;
            return (
              <button
                type="button"
                className={`cellbtn cell-offline ${cellClass(f)}`}
                title={`${f.cluster} is offline: as of its last heartbeat (${agoMs(off.beat)})`}
                aria-label={`${f.cluster} ${sinkLabel(f)}: cluster offline; ${age} as of its last heartbeat ${agoMs(off.beat)}${err}`}
                aria-pressed={pressed}
                onClick={() => setSelected(f)}
              >
                <span className="offline-tag">offline</span> {lag === undefined ? "never" : off.ageAtBeat === undefined ? "?" : humanDuration(off.ageAtBeat)} at last
                heartbeat
                {f.errorClass ? ` · ${errorClassName[f.errorClass]}` : ""}
              </button>
            );
          }
          return (
            <button
              type="button"
              className={`cellbtn ${cellClass(f)}`}
              aria-label={`${f.cluster} ${sinkLabel(f)}: ${lag === undefined ? "never exported" : humanDuration(lag) + " ago"}${err}`}
              aria-pressed={pressed}
              onClick={() => setSelected(f)}
            >
              {lag === undefined ? "never" : humanDuration(lag)}
              {f.errorClass ? ` · ${errorClassName[f.errorClass]}` : ""}
            </button>
          );
        },
      }),
    ),
  ];

  return (
    <>
      <div className="topline">
        <h1>Export freshness</h1>
        <span className="muted">
          {q.data ? `Built ${absolute(q.data.computedAt)}; refreshed every 5 s` : ""}
        </span>
      </div>
      <div className="legend" aria-label="Legend">
        <span><i className="age-fresh" /> under 5 min</span>
        <span><i className="age-aging" /> under 1 h</span>
        <span><i className="age-old" /> under 1 day</span>
        <span><i className="age-ancient" /> older, or terminal / circuit-open error</span>
        <span><i className="cls-transient" /> transient error</span>
        <span><i className="age-never" /> never exported</span>
        <span><i className="cell-offline" /> cluster offline: age as of its last heartbeat</span>
        <span><i className="cls-terminal" /> sink not found: an inventory names a sink the cluster does not have</span>
      </div>
      {q.error ? <ErrorBox error={q.error} onRetry={q.reload} /> : null}
      {selected ? <Cause f={selected} cluster={snap.clusters.get(selected.cluster)} onClose={() => setSelected(null)} /> : null}
      <div className="filters">
        <input type="search" aria-label="Filter clusters" placeholder="Cluster name" value={text} onChange={(e) => setText(e.target.value)} />
        <label>
          <input type="checkbox" checked={onlyProblems} onChange={(e) => setOnlyProblems(e.target.checked)} /> only clusters with an error or an
          export older than 5 min
        </label>
      </div>
      {!q.data && !q.error ? (
        <p className="muted">Loading…</p>
      ) : (
        <div className="matrix">
          <Table
            label="Freshness matrix"
            rows={shown}
            columns={columns}
            rowKey={(r) => r.cluster}
            initialSort={{ key: "cluster" }}
            empty={rows.length ? "No cluster matches." : "No agent has reported a sink yet."}
          />
        </div>
      )}
    </>
  );
}
