// One bundle: the objects clusters refused or failed to apply, its revisions, any revision's
// YAML, and the diff between two revisions.
import { useEffect, useState } from "react";
import { useCan, useFleetSnapshot, useSession } from "../api/context";
import { BundleRefusals } from "../components/BundleRefusals";
import { ConfirmButton } from "../components/ConfirmButton";
import { Diff } from "../components/Diff";
import { ErrorBox } from "../components/ErrorBox";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import { absolute, ago } from "../lib/format";
import { Link, navigate } from "../lib/router";
import { formatSelector } from "../lib/selector";
import { useQuery } from "../lib/useQuery";

export function BundleDetail({ name }: { name: string }) {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const live = snap.bundles.get(name);
  const canWrite = useCan(Role.OPERATOR);
  const latest = live?.latestRevision ?? 0n;
  const revs = useQuery((signal) => fleet.listBundleRevisions({ name }, { signal }), [name, latest]);
  const [viewing, setViewing] = useState<bigint>(0n);
  const shown = useQuery((signal) => fleet.getBundle({ name, revision: viewing }, { signal }), [name, viewing, viewing ? 0n : latest]);
  const [from, setFrom] = useState<bigint>(0n);
  const [to, setTo] = useState<bigint>(0n);
  const [diffAsked, setDiffAsked] = useState(false);
  const diff = useQuery(
    (signal) => (diffAsked ? fleet.diffBundleRevisions({ name, fromRevision: from, toRevision: to }, { signal }) : Promise.resolve(undefined)),
    [name, from, to, diffAsked],
  );
  const [deleteError, setDeleteError] = useState<unknown>(null);

  // Default diff: the latest revision against the one before it.
  const list = revs.data?.revisions ?? [];
  useEffect(() => {
    if (list.length >= 2 && to === 0n) {
      setTo(list[0].revision);
      setFrom(list[1].revision);
    }
  }, [list, to]);

  const bundle = shown.data?.bundle ?? live;
  const rev = shown.data?.revision;
  return (
    <>
      <div className="topline">
        <h1>Bundle {name}</h1>
        {canWrite ? (
          <div className="actions">
            <Link to={`/bundles/${encodeURIComponent(name)}/edit`} className="buttonlike">
              Edit / upload a revision
            </Link>
            <Link to={`/rollouts/new?bundle=${encodeURIComponent(name)}`} className="buttonlike secondary">
              Start rollout
            </Link>
            <ConfirmButton
              confirm={`Delete ${name}? Agents prune its objects.`}
              onConfirm={async () => {
                try {
                  await fleet.deleteBundle({ name });
                  navigate("/bundles");
                } catch (err) {
                  setDeleteError(err);
                }
              }}
            >
              Delete bundle
            </ConfirmButton>
          </div>
        ) : null}
      </div>
      {deleteError ? <ErrorBox error={deleteError} /> : null}
      {shown.error && !bundle ? <ErrorBox error={shown.error} onRetry={shown.reload} /> : null}
      {bundle ? (
        <section className="panel">
          <dl className="kv">
            <dt>Description</dt>
            <dd>{bundle.description || "–"}</dd>
            <dt>Cluster selector</dt>
            <dd>
              <code>{formatSelector(bundle.clusterSelector) || "every cluster"}</code> ({bundle.selectedClusters.toString()} clusters)
            </dd>
            <dt>Revisions</dt>
            <dd>
              latest {bundle.latestRevision.toString()}, stable {bundle.stableRevision ? bundle.stableRevision.toString() : "none"}
              {bundle.stableRevision !== bundle.latestRevision ? " (the latest is held: start a rollout to release it)" : ""}
            </dd>
            {bundle.activeRolloutId ? (
              <>
                <dt>Active rollout</dt>
                <dd>
                  <Link to={`/rollouts/${bundle.activeRolloutId}`}>#{bundle.activeRolloutId.toString()}</Link>
                </dd>
              </>
            ) : null}
          </dl>
        </section>
      ) : null}

      {snap.loaded ? <BundleRefusals fleet={fleet} bundle={name} clusters={snap.clusters} /> : null}

      <h2>Revisions</h2>
      {revs.error ? <ErrorBox error={revs.error} onRetry={revs.reload} /> : null}
      <div className="table-wrap">
        <table aria-label="Revisions">
          <thead>
            <tr>
              <th className="num">Revision</th>
              <th>Uploaded</th>
              <th>By</th>
              <th>Message</th>
              <th>Objects</th>
              <th>Digest</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {list.map((r) => (
              <tr key={r.revision.toString()} aria-current={rev?.revision === r.revision ? "true" : undefined}>
                <td className="num">{r.revision.toString()}</td>
                <td title={absolute(r.createdAt)}>{ago(r.createdAt)}</td>
                <td>{r.createdBy}</td>
                <td>{r.message || <span className="muted">–</span>}</td>
                <td>{r.objects.length}</td>
                <td className="mono muted">{r.digest.slice(7, 19)}</td>
                <td>
                  <button type="button" onClick={() => setViewing(r.revision)} disabled={rev?.revision === r.revision}>
                    View YAML
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>

      <h2>Diff</h2>
      {list.length < 2 ? (
        <p className="muted">One revision only: nothing to compare.</p>
      ) : (
        <>
          <div className="row">
            <label>
              From{" "}
              <select aria-label="From revision" value={from.toString()} onChange={(e) => { setFrom(BigInt(e.target.value)); setDiffAsked(false); }}>
                {list.map((r) => (
                  <option key={r.revision.toString()} value={r.revision.toString()}>
                    {r.revision.toString()}
                  </option>
                ))}
              </select>
            </label>
            <label>
              To{" "}
              <select aria-label="To revision" value={to.toString()} onChange={(e) => { setTo(BigInt(e.target.value)); setDiffAsked(false); }}>
                {list.map((r) => (
                  <option key={r.revision.toString()} value={r.revision.toString()}>
                    {r.revision.toString()}
                  </option>
                ))}
              </select>
            </label>
            <button type="button" onClick={() => setDiffAsked(true)}>
              Show diff
            </button>
          </div>
          {diff.error ? <ErrorBox error={diff.error} /> : null}
          {diff.data ? (
            <>
              <p className="muted">
                Revision {diff.data.fromRevision.toString()} → {diff.data.toRevision.toString()}
                {diff.data.selectorChanged ? "; the cluster selector changed too" : ""}
              </p>
              <Diff text={diff.data.unifiedDiff} />
            </>
          ) : null}
        </>
      )}
      <h2>
        YAML of revision {rev ? rev.revision.toString() : "…"}
        {rev && rev.revision === bundle?.latestRevision ? " (latest)" : ""}
      </h2>
      {shown.error && bundle ? <ErrorBox error={shown.error} onRetry={shown.reload} /> : null}
      {rev ? (
        <>
          <p className="muted">
            Selector <code>{formatSelector(rev.clusterSelector) || "every cluster"}</code>; objects:{" "}
            {rev.objects.map((o) => `${o.kind} ${o.namespace ? o.namespace + "/" : ""}${o.name}`).join(", ")}
          </p>
          <pre className="code" aria-label="Manifests">
            {rev.manifests}
          </pre>
        </>
      ) : null}

    </>
  );
}
