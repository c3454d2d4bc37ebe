// One cluster: what its agent last reported (inventories, sinks, applied objects, drift) and
// what the hub wants it to run, how it registered, with the admin's approval, revoke and
// delete and the operator's labels.
import { useEffect, useRef, useState } from "react";
import { useCan, useFleetSnapshot, useSession } from "../api/context";
import { ErrorClassBadge, Labels, StateBadge } from "../components/Badges";
import { ConfirmButton } from "../components/ConfirmButton";
import { ErrorBox } from "../components/ErrorBox";
import { HeartbeatHistory } from "../components/HeartbeatHistory";
import { ObjectProblems } from "../components/ObjectProblems";
import { ApprovalActions, ApprovalBadge } from "../components/Registrations";
import {
  ClusterApproval,
  ClusterState,
  Role,
  SinkErrorClass,
  type AgentStatus,
  type Cluster,
  type TargetCoverage,
} from "../gen/kollect/fleet/v1/types_pb";
import { conditionHealth } from "../lib/conditions";
import { coverageHealth } from "../lib/coverage";
import { absolute, ago, applyResultName, count, humanDuration, labelsText, ms } from "../lib/format";
import { pendingApproval, tokenLabel } from "../lib/registrations";
import { Link, navigate } from "../lib/router";
import { useQuery } from "../lib/useQuery";
import { useNow } from "../lib/useNow";

function LabelEditor({ cluster, onSaved }: { cluster: Cluster; onSaved: () => void }) {
  const { fleet } = useSession();
  const [editing, setEditing] = useState(false);
  const [text, setText] = useState("");
  const [error, setError] = useState<unknown>(null);
  if (!editing) {
    return (
      <button
        type="button"
        onClick={() => {
          setText(labelsText(cluster.labels));
          setEditing(true);
        }}
      >
        Edit labels
      </button>
    );
  }
  const save = async () => {
    setError(null);
    try {
      const labels: Record<string, string> = {};
      for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
        const eq = part.indexOf("=");
        if (eq <= 0) throw new Error(`"${part}" is not key=value`);
        labels[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
      }
      await fleet.setClusterLabels({ clusterName: cluster.name, labels });
      setEditing(false);
      onSaved();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div className="panel">
      <div className="field">
        <label htmlFor="labels">
          <span>Labels</span> <small>key=value, comma-separated; bundles are re-selected at once</small>
        </label>
        <input id="labels" value={text} onChange={(e) => setText(e.target.value)} />
      </div>
      <div className="actions">
        <button type="button" className="primary" onClick={save}>
          Save labels
        </button>
        <button type="button" onClick={() => setEditing(false)}>
          Cancel
        </button>
      </div>
      {error ? <ErrorBox error={error} /> : null}
    </div>
  );
}

/** One line per target: its coverage state, rows, extraction errors and, when not complete, why. */
function Coverage({ entries }: { entries: TargetCoverage[] }) {
  if (!entries.length) return <span className="muted">not reported</span>;
  return (
    <>
      {entries.map((c) => (
        <div key={c.target}>
          {c.target}{" "}
          <span className={`badge cov-${coverageHealth(c.state)}`} title="coverage: how much of the target's objects the rows describe">
            {c.state}
          </span>{" "}
          <span className="muted">
            {count(c.rows)} rows
            {c.extractionErrors > 0n ? `, ${count(c.extractionErrors)} extraction errors` : ""}
          </span>
          {c.state !== "complete" && c.reason ? <div className="muted">{c.reason}</div> : null}
        </div>
      ))}
    </>
  );
}

/** How the cluster registered: when, with which bootstrap token, from where; and its approval. */
function RegistrationPanel({ c, now, onDone }: { c: Cluster; now: number; onDone: () => void }) {
  const r = c.registration;
  const decision =
    c.approval === ClusterApproval.PENDING
      ? "pending: waiting for an admin"
      : c.approval === ClusterApproval.REJECTED
        ? `rejected by ${r?.decidedBy || "an admin"} ${ago(r?.decidedAt, now)}`
        : r?.decidedBy
          ? `approved by ${r.decidedBy} ${ago(r.decidedAt, now)}`
          : "approved at registration (its token did not require approval)";
  return (
    <section className="panel" aria-labelledby="registration">
      <h2 id="registration">
        Registration <ApprovalBadge c={c} now={now} />
      </h2>
      {pendingApproval(c) ? (
        <div className="notice" data-testid="pending-approval">
          <p>
            This registration waits for an admin&apos;s approval. Until then the cluster reports its status but receives no bundle and no
            preview, takes part in no rollout, and counts in no fleet total. Approve it only if you know who registered it, with this token,
            from this address.
          </p>
          <ApprovalActions c={c} onDone={onDone} />
        </div>
      ) : null}
      <dl className="kv">
        <dt>Registered</dt>
        <dd title={absolute(c.registeredAt)}>
          {absolute(c.registeredAt)} ({ago(c.registeredAt, now)})
        </dd>
        <dt>Bootstrap token</dt>
        <dd className="mono">{tokenLabel(r)}</dd>
        <dt>Token created by</dt>
        <dd>{r?.bootstrapTokenCreatedBy || "–"}</dd>
        <dt>From address</dt>
        <dd className="mono">{r?.peerAddress || "not recorded"}</dd>
        <dt>Agent at registration</dt>
        <dd>{r?.agentVersion || "–"}</dd>
        <dt>Approval</dt>
        <dd>{decision}</dd>
      </dl>
    </section>
  );
}

function Status({ st }: { st: AgentStatus }) {
  return (
    <>
      <h2>Inventories</h2>
      {st.inventories.length ? (
        <div className="table-wrap">
          <table aria-label="Inventories">
            <thead>
              <tr>
                <th>Inventory</th>
                <th className="num">Items</th>
                <th>Coverage</th>
                <th>Conditions</th>
              </tr>
            </thead>
            <tbody>
              {st.inventories.map((i) => (
                <tr key={`${i.namespace}/${i.name}`}>
                  <td>
                    {i.namespace ? `${i.namespace}/` : ""}
                    {i.name}
                  </td>
                  <td className="num">{count(i.itemCount)}</td>
                  <td>
                    <Coverage entries={i.coverage} />
                  </td>
                  <td>
                    {i.conditions.map((c) => (
                      <div key={c.type}>
                        <span className={`badge cond-${conditionHealth(c.type, c.status)}`}>
                          {c.type}={c.status}
                        </span>{" "}
                        {c.reason} <span className="muted">{c.message}</span>{" "}
                        <span className="muted" title={absolute(c.lastTransitionTime)}>
                          (since {ago(c.lastTransitionTime)})
                        </span>
                      </div>
                    ))}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : (
        <p className="muted">The agent reports no inventory.</p>
      )}

      <h2 id="sinks">Sinks</h2>
      {st.sinks.length ? (
        <div className="table-wrap">
          <table aria-label="Sinks">
            <thead>
              <tr>
                <th>Sink</th>
                <th>Type</th>
                <th>Last success</th>
                <th>Last attempt</th>
                <th>Last error</th>
              </tr>
            </thead>
            <tbody>
              {st.sinks.map((s) => (
                <tr key={`${s.kind}/${s.namespace}/${s.name}`} className={s.errorClass !== SinkErrorClass.UNSPECIFIED ? "skew" : undefined}>
                  <td>
                    {s.kind} {s.namespace}/{s.name}
                  </td>
                  <td>{s.type}</td>
                  <td title={absolute(s.lastSuccessTime)}>{ago(s.lastSuccessTime)}</td>
                  <td title={absolute(s.lastAttemptTime)}>{ago(s.lastAttemptTime)}</td>
                  <td>
                    {s.lastError ? (
                      <>
                        <ErrorClassBadge cls={s.errorClass} /> <pre>{s.lastError}</pre>
                      </>
                    ) : (
                      <span className="muted">none</span>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : (
        <p className="muted">The agent reports no sink.</p>
      )}

      <ObjectProblems st={st} />

      <h2>Applied objects</h2>
      {st.bundles.length ? (
        st.bundles.map((b) => (
          <div key={b.bundle} className="panel">
            <h3>
              <Link to={`/bundles/${encodeURIComponent(b.bundle)}`}>{b.bundle}</Link> revision {b.revision.toString()}{" "}
              <span className="muted mono">{b.digest.slice(0, 19)}</span>
            </h3>
            <table aria-label={`Objects of ${b.bundle}`}>
              <thead>
                <tr>
                  <th>Object</th>
                  <th>Result</th>
                  <th>Message</th>
                </tr>
              </thead>
              <tbody>
                {b.objects.map((o) => (
                  <tr key={`${o.object?.kind}/${o.object?.namespace}/${o.object?.name}`}>
                    <td>
                      {o.object?.kind} {o.object?.namespace ? `${o.object.namespace}/` : ""}
                      {o.object?.name}
                    </td>
                    <td>
                      <span className={`badge res-${applyResultName[o.result].replace(" ", "-")}`}>{applyResultName[o.result]}</span>
                    </td>
                    <td>{o.message || <span className="muted">–</span>}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ))
      ) : (
        <p className="muted">The agent has applied no bundle.</p>
      )}
    </>
  );
}

export function ClusterDetail({ name }: { name: string }) {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const live = snap.clusters.get(name);
  const liveBeat = ms(live?.lastHeartbeat);
  const q = useQuery((signal) => fleet.getCluster({ name }, { signal }), [name], { intervalMs: 5000, refresh: [liveBeat, live?.state] });
  const canOperate = useCan(Role.OPERATOR);
  const isAdmin = useCan(Role.ADMIN);
  const [actionError, setActionError] = useState<unknown>(null);
  const now = useNow(1000);
  const c = q.data?.cluster ?? live;
  const st = q.data?.status;
  // The history grows when something changes (then the live feed sends the cluster again and
  // liveBeat moves), otherwise by a record a minute at most.
  const history = useQuery((signal) => fleet.listHeartbeats({ cluster: name }, { signal }), [name], { intervalMs: 15000 });
  const seenBeat = useRef(liveBeat);
  const reloadHistory = history.reload;
  useEffect(() => {
    if (seenBeat.current === liveBeat) return;
    seenBeat.current = liveBeat;
    reloadHistory();
  }, [liveBeat, reloadHistory]);

  if (!c) {
    return (
      <>
        <h1>{name}</h1>
        {q.error ? <ErrorBox error={q.error} onRetry={q.reload} /> : <p className="muted">Loading…</p>}
        <Link to="/">Back to the fleet</Link>
      </>
    );
  }
  return (
    <>
      <div className="topline">
        <h1>
          {c.name} <StateBadge state={c.state} /> <ApprovalBadge c={c} now={now} />
        </h1>
        <div className="actions">
          {canOperate ? <LabelEditor cluster={c} onSaved={q.reload} /> : null}
          {isAdmin && c.state !== ClusterState.REVOKED ? (
            <ConfirmButton
              confirm={`Revoke ${c.name}'s agent? It keeps what it applied but receives nothing more.`}
              onConfirm={async () => {
                setActionError(null);
                try {
                  await fleet.revokeAgent({ clusterName: c.name });
                  q.reload();
                } catch (err) {
                  setActionError(err);
                }
              }}
            >
              Revoke agent
            </ConfirmButton>
          ) : null}
          {isAdmin ? (
            <ConfirmButton
              confirm={`Delete ${c.name} from the fleet? Its agent is refused from its next call.`}
              onConfirm={async () => {
                setActionError(null);
                try {
                  await fleet.deleteCluster({ clusterName: c.name });
                  navigate("/");
                } catch (err) {
                  setActionError(err);
                }
              }}
            >
              Delete cluster
            </ConfirmButton>
          ) : null}
        </div>
      </div>
      {actionError ? <ErrorBox error={actionError} /> : null}
      {q.error ? <ErrorBox error={q.error} onRetry={q.reload} compact /> : null}
      <div className="grid2">
        <section className="panel" aria-label="Agent">
          <dl className="kv">
            <dt>Labels</dt>
            <dd>
              <Labels labels={c.labels} />
            </dd>
            <dt>Agent version</dt>
            <dd>
              {c.agentVersion || "–"} {c.versionSkew ? <span className="skewmark">differs from the fleet's most common version</span> : null}
            </dd>
            <dt>Kubernetes</dt>
            <dd>{c.kubernetesVersion || "–"}</dd>
            <dt>Registered</dt>
            <dd>{absolute(c.registeredAt)}</dd>
            <dt>Configuration</dt>
            <dd>
              {c.configInSync ? "in sync" : <span className="skewmark">not in sync</span>}{" "}
              <span className="muted mono" title="applied / desired digest">
                {c.appliedConfigDigest.slice(7, 19) || "none"} / {c.desiredConfigDigest.slice(7, 19) || "none"}
              </span>
            </dd>
            <dt>Sink errors</dt>
            <dd>{c.sinkErrors.toString()}</dd>
          </dl>
        </section>
        <section className="panel" aria-label="Heartbeats">
          <dl className="kv">
            <dt>Last heartbeat</dt>
            <dd title={absolute(c.lastHeartbeat)}>{ms(c.lastHeartbeat) ? `${humanDuration(now - ms(c.lastHeartbeat)!)} ago` : "never"}</dd>
            <dt>Agent clock</dt>
            <dd>{st ? absolute(st.observedAt) : "–"}</dd>
          </dl>
        </section>
      </div>
      <RegistrationPanel c={c} now={now} onDone={q.reload} />
      <section aria-labelledby="heartbeat-history">
        <h2 id="heartbeat-history">Heartbeat history</h2>
        <p className="hint">
          A record for every heartbeat that changed one of these values, otherwise one a minute; the hub keeps the last 100.
          A heartbeat that ended a silence says so.
        </p>
        {history.error ? <ErrorBox error={history.error} onRetry={history.reload} compact /> : null}
        {history.data ? <HeartbeatHistory records={history.data.heartbeats} /> : history.error ? null : <p className="muted">Loading…</p>}
      </section>
      <h2>Bundles</h2>
      {c.bundles.length ? (
        <div className="table-wrap">
          <table aria-label="Bundles of this cluster">
            <thead>
              <tr>
                <th>Bundle</th>
                <th className="num">Desired</th>
                <th className="num">Applied</th>
                <th className="num">Failed objects</th>
              </tr>
            </thead>
            <tbody>
              {c.bundles.map((b) => (
                <tr key={b.bundle} className={b.desiredRevision !== b.appliedRevision ? "skew" : undefined}>
                  <td>
                    <Link to={`/bundles/${encodeURIComponent(b.bundle)}`}>{b.bundle}</Link>
                  </td>
                  <td className="num">{b.desiredRevision.toString()}</td>
                  <td className="num">{b.appliedRevision ? b.appliedRevision.toString() : "none"}</td>
                  <td className="num">{b.failedObjects.toString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : pendingApproval(c) ? (
        <p className="muted">None while its registration waits for approval.</p>
      ) : (
        <p className="muted">No bundle selects this cluster.</p>
      )}
      {st ? <Status st={st} /> : <p className="notice">No heartbeat yet: the agent has registered but not reported its status.</p>}
    </>
  );
}
