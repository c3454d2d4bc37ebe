import { ClusterState, SinkErrorClass } from "../gen/kollect/fleet/v1/types_pb";
import { clusterStateName, errorClassName } from "../lib/format";

export function StateBadge({ state }: { state: ClusterState }) {
  const name = clusterStateName[state] ?? "unknown";
  return <span className={`badge state-${name}`}>{name}</span>;
}

export function ErrorClassBadge({ cls }: { cls: SinkErrorClass }) {
  if (cls === SinkErrorClass.UNSPECIFIED) return null;
  const name = errorClassName[cls];
  return <span className={`badge err-${name.replace(" ", "-")}`}>{name}</span>;
}

export function Labels({ labels }: { labels: Record<string, string> }) {
  const entries = Object.entries(labels).sort(([a], [b]) => a.localeCompare(b));
  if (!entries.length) return <span className="muted">none</span>;
  return (
    <span className="labels">
      {entries.map(([k, v]) => (
        <span className="label" key={k}>
          {k}={v}
        </span>
      ))}
    </span>
  );
}
