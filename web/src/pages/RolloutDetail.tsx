// One rollout, live: its waves and clusters, and the operator's pause, resume (or approve),
// abort and rollback.
import { useState } from "react";
import { useCan, useFleetSnapshot, useSession } from "../api/context";
import { ConfirmButton } from "../components/ConfirmButton";
import { ErrorBox } from "../components/ErrorBox";
import { PhaseBadge, RolloutClusters, Waves, isActive, strategyText } from "../components/RolloutParts";
import { RolloutPhase } from "../gen/kollect/fleet/v1/rollout_pb";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import { absolute } from "../lib/format";
import { Link, navigate } from "../lib/router";
import { useQuery } from "../lib/useQuery";

export function RolloutDetail({ id }: { id: bigint }) {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const canWrite = useCan(Role.OPERATOR);
  const live = snap.rollouts.get(id.toString());
  // A WatchFleet event for this rollout (at most one a second) triggers a fresh GetRollout for
  // its clusters; the interval covers a stream that is reconnecting.
  const liveKey = live ? `${live.phase}:${live.currentWave}:${live.updatedAt?.seconds}:${live.waves.map((w) => w.clustersHealthy + "/" + w.clustersFailed).join(",")}` : "";
  const q = useQuery((signal) => fleet.getRollout({ id }, { signal }), [id.toString()], { intervalMs: 3000, refresh: liveKey });
  const [reason, setReason] = useState("");
  const [actionError, setActionError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const r = q.data?.rollout;

  const act = async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setActionError(null);
    try {
      await fn();
      q.reload();
    } catch (err) {
      setActionError(err);
    } finally {
      setBusy(false);
    }
  };

  if (!r) {
    return (
      <>
        <h1>Rollout #{id.toString()}</h1>
        {q.error ? <ErrorBox error={q.error} onRetry={q.reload} /> : <p className="muted">Loading…</p>}
      </>
    );
  }
  const active = isActive(r);
  return (
    <>
      <div className="topline">
        <h1>
          Rollout #{r.id.toString()}: <Link to={`/bundles/${encodeURIComponent(r.bundle)}`}>{r.bundle}</Link>{" "}
          {r.fromRevision ? r.fromRevision.toString() : "none"} → {r.toRevision.toString()} <PhaseBadge phase={r.phase} />
        </h1>
      </div>
      {q.error ? <ErrorBox error={q.error} onRetry={q.reload} compact /> : null}
      {r.message ? <p className="notice" data-testid="rollout-message">{r.message}</p> : null}
      {canWrite ? (
        <div className="actions panel" aria-label="Rollout actions">
          {active ? (
            <input aria-label="Reason" placeholder="Reason (for pause or abort)" value={reason} onChange={(e) => setReason(e.target.value)} />
          ) : null}
          {r.phase === RolloutPhase.PROGRESSING || r.phase === RolloutPhase.AWAITING_APPROVAL ? (
            <button type="button" disabled={busy} onClick={() => act(() => fleet.pauseRollout({ id: r.id, reason }))}>
              Pause
            </button>
          ) : null}
          {r.phase === RolloutPhase.PAUSED ? (
            <button type="button" className="primary" disabled={busy} onClick={() => act(() => fleet.resumeRollout({ id: r.id }))}>
              Resume
            </button>
          ) : null}
          {r.phase === RolloutPhase.AWAITING_APPROVAL ? (
            <button type="button" className="primary" disabled={busy} onClick={() => act(() => fleet.resumeRollout({ id: r.id }))}>
              Approve next wave
            </button>
          ) : null}
          {active ? (
            <ConfirmButton confirm="Abort for good? Moved clusters keep the new revision." onConfirm={() => act(() => fleet.abortRollout({ id: r.id, reason }))}>
              Abort
            </ConfirmButton>
          ) : null}
          {r.phase !== RolloutPhase.SUPERSEDED ? (
            <ConfirmButton
              danger={false}
              confirm={`Roll the clusters this rollout moved back to revision ${r.fromRevision}?`}
              onConfirm={() =>
                act(async () => {
                  const res = await fleet.rollbackRollout({ id: r.id });
                  if (res.rollout) navigate(`/rollouts/${res.rollout.id}`);
                })
              }
            >
              Roll back
            </ConfirmButton>
          ) : null}
          {actionError ? <ErrorBox error={actionError} /> : null}
        </div>
      ) : null}
      <section className="panel">
        <dl className="kv">
          <dt>Strategy</dt>
          <dd>{strategyText(r.strategy).join("; ")}</dd>
          <dt>Started</dt>
          <dd>
            {absolute(r.createdAt)} by {r.createdBy}
          </dd>
          {r.finishedAt ? (
            <>
              <dt>Finished</dt>
              <dd>{absolute(r.finishedAt)}</dd>
            </>
          ) : null}
          {r.rollbackOf ? (
            <>
              <dt>Rolls back</dt>
              <dd>
                <Link to={`/rollouts/${r.rollbackOf}`}>#{r.rollbackOf.toString()}</Link>
              </dd>
            </>
          ) : null}
        </dl>
      </section>
      <h2>Waves</h2>
      <Waves r={r} />
      <h2>Clusters</h2>
      <RolloutClusters r={r} />
    </>
  );
}
