import { ApplyResult, type AgentStatus, type ObjectResult } from "../gen/kollect/fleet/v1/types_pb";
import { applyResultName } from "../lib/format";

type Entry = { bundle: string; o: ObjectResult };

function entries(st: AgentStatus, results: ApplyResult[]): Entry[] {
  return st.bundles.flatMap((b) => b.objects.filter((o) => results.includes(o.result)).map((o) => ({ bundle: b.bundle, o })));
}

function objectName(o: ObjectResult): string {
  const ref = o.object;
  if (!ref) return "(unnamed object)";
  return `${ref.kind} ${ref.namespace ? `${ref.namespace}/` : ""}${ref.name}`;
}

function EntryList({ label, items, fallback }: { label: string; items: Entry[]; fallback: string }) {
  return (
    <ul aria-label={label}>
      {items.map(({ bundle, o }) => (
        <li key={`${bundle}/${objectName(o)}/${o.result}`}>
          <span className={`badge res-${applyResultName[o.result].replace(" ", "-")}`}>{applyResultName[o.result]}</span> {objectName(o)} (bundle{" "}
          {bundle}): {o.message || fallback}
        </li>
      ))}
    </ul>
  );
}

/**
 * ObjectProblems lists, by name, the bundle objects the agent refused (outside its allowlist)
 * or failed to apply, and the local edits and deletions it reverted: what keeps a cluster
 * from holding its bundles, and what someone changed on it by hand.
 */
export function ObjectProblems({ st }: { st: AgentStatus }) {
  const notApplied = entries(st, [ApplyResult.REFUSED, ApplyResult.FAILED]);
  const drift = entries(st, [ApplyResult.DRIFT_REVERTED]);
  return (
    <>
      <h2>Objects not applied</h2>
      {notApplied.length ? (
        <EntryList label="Objects not applied" items={notApplied} fallback="no reason given" />
      ) : (
        <p className="muted">The agent applied every object of its bundles.</p>
      )}
      <h2>Drift</h2>
      {drift.length ? (
        <EntryList label="Drift events" items={drift} fallback="a local edit was reverted" />
      ) : (
        <p className="muted">No local edit or deletion of a hub-managed object was found since the last apply.</p>
      )}
    </>
  );
}
