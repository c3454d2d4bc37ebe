// The clusters whose agents did not apply some of a bundle's objects: refused (outside the
// agent's allowlist) or failed, each object by name with the agent's message. The live fleet
// says which clusters have such objects (failed_objects of each cluster's bundle); their last
// heartbeats (GetCluster) say which objects and why.
import type { Fleet } from "../api/client";
import { ApplyResult, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import { applyResultName } from "../lib/format";
import { Link } from "../lib/router";
import { useQuery } from "../lib/useQuery";
import { ErrorBox } from "./ErrorBox";

/** At most this many clusters are read; more are counted, not listed. */
export const refusalClusterLimit = 20;

/** How often the listed clusters' objects are read again. */
export const refusalPollMs = 5_000;

export interface Refusal {
  cluster: string;
  object: string;
  result: ApplyResult;
  message: string;
}

/** Clusters that report objects of bundle not applied, sorted by name. */
export function clustersNotApplying(clusters: Iterable<Cluster>, bundle: string): Cluster[] {
  return [...clusters]
    .filter((c) => c.bundles.some((b) => b.bundle === bundle && b.failedObjects > 0n))
    .sort((a, b) => a.name.localeCompare(b.name));
}

// clusters is the live fleet's map, not an iterable: this component also renders on its own (its
// reads answering, its poll) with the props of its parent's last render, and a one-shot iterator
// such as Map.values() would then be empty, so the list would say every cluster applied the
// bundle until the parent happened to render again.
export function BundleRefusals({ fleet, bundle, clusters }: { fleet: Fleet; bundle: string; clusters: ReadonlyMap<string, Cluster> }) {
  const affected = clustersNotApplying(clusters.values(), bundle);
  const read = affected.slice(0, refusalClusterLimit);
  const names = read.map((c) => c.name);
  // Read again when a cluster's count of objects not applied changes.
  const refresh = read.map((c) => `${c.name}:${c.bundles.find((b) => b.bundle === bundle)?.failedObjects ?? 0n}`);
  const q = useQuery(
    async (signal) => {
      const out: Refusal[] = [];
      const answers = await Promise.all(names.map((name) => fleet.getCluster({ name }, { signal })));
      for (const r of answers) {
        for (const b of r.status?.bundles ?? []) {
          if (b.bundle !== bundle) continue;
          for (const o of b.objects) {
            if (o.result !== ApplyResult.REFUSED && o.result !== ApplyResult.FAILED) continue;
            const ref = o.object;
            out.push({
              cluster: r.cluster?.name ?? "",
              object: ref ? `${ref.kind} ${ref.namespace ? ref.namespace + "/" : ""}${ref.name}` : "(unnamed object)",
              result: o.result,
              message: o.message,
            });
          }
        }
      }
      return out;
    },
    [bundle, names],
    // Also poll: a count that did not change can still hide a newer message, and one missed
    // update of the live feed must not leave the list stale.
    { refresh, intervalMs: refusalPollMs },
  );
  return (
    <section aria-labelledby="refusals">
      <h2 id="refusals">Objects clusters did not apply</h2>
      {!affected.length ? (
        <p className="muted">Every cluster that reported this bundle applied all of its objects.</p>
      ) : (
        <>
          <p>
            {affected.length} cluster{affected.length === 1 ? "" : "s"} refused or failed to apply objects of this bundle
            {affected.length > read.length ? ` (the first ${read.length} are listed)` : ""}.
          </p>
          {q.error ? <ErrorBox error={q.error} onRetry={q.reload} compact /> : null}
          <div className="table-wrap">
            <table aria-label="Objects not applied by cluster">
              <thead>
                <tr>
                  <th>Cluster</th>
                  <th>Object</th>
                  <th>Result</th>
                  <th>Agent's message</th>
                </tr>
              </thead>
              <tbody>
                {(q.data ?? []).map((r) => (
                  <tr key={`${r.cluster}/${r.object}`}>
                    <td>
                      <Link to={`/clusters/${encodeURIComponent(r.cluster)}`}>{r.cluster}</Link>
                    </td>
                    <td>{r.object}</td>
                    <td>
                      <span className={`badge res-${applyResultName[r.result].replace(" ", "-")}`}>{applyResultName[r.result]}</span>
                    </td>
                    <td>{r.message || <span className="muted">no reason given</span>}</td>
                  </tr>
                ))}
                {!q.data && !q.error ? (
                  <tr>
                    <td colSpan={4} className="muted">
                      Loading…
                    </td>
                  </tr>
                ) : null}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}
