// New registrations: who registered, with which bootstrap token, when and from where, with the
// admin's Approve and Reject for those that wait. Shown on the overview, the agents page and a
// cluster's page, so that a cluster registered with a stolen or misused token stands out.
import { useState } from "react";
import { useCan, useSession } from "../api/context";
import { ClusterApproval, Role, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import { absolute, ago } from "../lib/format";
import { isNewRegistration, pendingApproval, tokenLabel } from "../lib/registrations";
import { Link } from "../lib/router";
import { ConfirmButton } from "./ConfirmButton";
import { ErrorBox } from "./ErrorBox";

/** "pending approval", "new" or "rejected" beside a cluster's state; nothing otherwise. */
export function ApprovalBadge({ c, now }: { c: Cluster; now: number }) {
  if (pendingApproval(c)) {
    return (
      <span className="badge state-pending" title="registered with a token that requires approval: it receives no bundle until an admin approves it">
        pending approval
      </span>
    );
  }
  if (c.approval === ClusterApproval.REJECTED) return <span className="badge state-revoked">rejected</span>;
  if (isNewRegistration(c, now)) {
    return (
      <span className="badge approval-new" title={`registered ${ago(c.registeredAt, now)}`}>
        new
      </span>
    );
  }
  return null;
}

/** Approve and Reject for an admin; an error stays beside the buttons. */
export function ApprovalActions({ c, onDone }: { c: Cluster; onDone?: () => void }) {
  const { fleet } = useSession();
  const isAdmin = useCan(Role.ADMIN);
  const [error, setError] = useState<unknown>(null);
  if (!isAdmin || !pendingApproval(c)) return null;
  const act = async (fn: () => Promise<unknown>) => {
    setError(null);
    try {
      await fn();
      onDone?.();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <span className="actions">
      <button type="button" className="primary" aria-label={`Approve ${c.name}`} onClick={() => act(() => fleet.approveCluster({ clusterName: c.name }))}>
        Approve
      </button>
      <ConfirmButton
        confirm={`Reject ${c.name}? Its agent is revoked, and token ${c.registration?.bootstrapTokenId || "it used"} can never register this name again.`}
        onConfirm={() => act(() => fleet.rejectCluster({ clusterName: c.name }))}
      >
        Reject
      </ConfirmButton>
      {error ? <ErrorBox error={error} compact /> : null}
    </span>
  );
}

/** How many registrations the section lists: a fleet rolled out today registers them all. */
const shownRegistrations = 20;

/**
 * The clusters pending approval, then those registered in the last day, newest first, the
 * first shownRegistrations of them; nothing when there is none.
 */
export function NewRegistrations({ clusters, now, more }: { clusters: Cluster[]; now: number; more?: string }) {
  const fresh = clusters
    .filter((c) => isNewRegistration(c, now))
    .sort((a, b) => Number(pendingApproval(b)) - Number(pendingApproval(a)) || Number((b.registeredAt?.seconds ?? 0n) - (a.registeredAt?.seconds ?? 0n)));
  if (!fresh.length) return null;
  const waiting = fresh.filter(pendingApproval).length;
  const shown = fresh.slice(0, shownRegistrations);
  return (
    <section className="panel" aria-label="New registrations">
      <h2>New registrations</h2>
      <p className="hint">
        {waiting
          ? `${waiting} waiting for an admin's approval: a cluster pending approval reports its status but receives no bundle and counts in no fleet total. `
          : ""}
        Clusters registered in the last 24 hours, with the bootstrap token and the address they registered with: check that you know each one.
      </p>
      <div className="table-wrap">
        <table aria-label="New registrations">
          <thead>
            <tr>
              <th>Cluster</th>
              <th>Approval</th>
              <th>Registered</th>
              <th>Bootstrap token</th>
              <th>Token created by</th>
              <th>From</th>
              <th>Agent</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {shown.map((c) => (
              <tr key={c.name} className={pendingApproval(c) ? "skew" : undefined}>
                <td>
                  <Link to={`/clusters/${encodeURIComponent(c.name)}`}>{c.name}</Link>
                </td>
                <td>
                  {pendingApproval(c) ? (
                    <ApprovalBadge c={c} now={now} />
                  ) : c.registration?.decidedBy ? (
                    `approved by ${c.registration.decidedBy}`
                  ) : (
                    "approved at registration"
                  )}
                </td>
                <td title={absolute(c.registeredAt)}>{ago(c.registeredAt, now)}</td>
                <td className="mono">{tokenLabel(c.registration)}</td>
                <td>{c.registration?.bootstrapTokenCreatedBy || "–"}</td>
                <td className="mono">{c.registration?.peerAddress || "–"}</td>
                <td>{c.registration?.agentVersion || c.agentVersion || "–"}</td>
                <td>
                  <ApprovalActions c={c} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {fresh.length > shown.length ? (
        <p className="muted">
          and {fresh.length - shown.length} more{more ? `: ${more}` : ""}
        </p>
      ) : null}
    </section>
  );
}
