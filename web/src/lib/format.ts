// Formatting of times, durations and enum values for display.
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import { ApplyResult, ClusterState, SinkErrorClass } from "../gen/kollect/fleet/v1/types_pb";
import { RolloutClusterState, RolloutPhase, WavePhase } from "../gen/kollect/fleet/v1/rollout_pb";

/** Milliseconds since the epoch, or undefined for an unset timestamp. */
export function ms(ts: Timestamp | undefined): number | undefined {
  if (!ts || (ts.seconds === 0n && ts.nanos === 0)) return undefined;
  return Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6);
}

export function durationMsOf(d: Duration | undefined): number | undefined {
  if (!d) return undefined;
  return Number(d.seconds) * 1000 + Math.floor(d.nanos / 1e6);
}

/** "3 s", "4 min", "2 h 5 min", "3 d" — compact, rounded down. */
export function humanDuration(msValue: number): string {
  const s = Math.max(0, Math.floor(msValue / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  return `${Math.floor(h / 24)} d`;
}

/** "5 min ago", or "never". */
export function ago(ts: Timestamp | undefined, now = Date.now()): string {
  return agoMs(ms(ts), now);
}

export function agoMs(t: number | undefined, now = Date.now()): string {
  if (t === undefined) return "never";
  const d = now - t;
  if (d < 1000) return "just now";
  return `${humanDuration(d)} ago`;
}

/** An absolute local time for tooltips and detail views. */
export function absolute(ts: Timestamp | undefined): string {
  const t = ms(ts);
  return t === undefined ? "never" : new Date(t).toLocaleString();
}

export function count(n: bigint | number): string {
  return Number(n).toLocaleString("en-US");
}

export const clusterStateName: Record<ClusterState, string> = {
  [ClusterState.UNSPECIFIED]: "unknown",
  [ClusterState.PENDING]: "pending",
  [ClusterState.ONLINE]: "online",
  [ClusterState.STALE]: "stale",
  [ClusterState.OFFLINE]: "offline",
  [ClusterState.REVOKED]: "revoked",
};

export const applyResultName: Record<ApplyResult, string> = {
  [ApplyResult.UNSPECIFIED]: "unknown",
  [ApplyResult.APPLIED]: "applied",
  [ApplyResult.FAILED]: "failed",
  [ApplyResult.REFUSED]: "refused",
  [ApplyResult.PRUNED]: "pruned",
  [ApplyResult.DRIFT_REVERTED]: "drift reverted",
};

export const errorClassName: Record<SinkErrorClass, string> = {
  [SinkErrorClass.UNSPECIFIED]: "none",
  [SinkErrorClass.TRANSIENT]: "transient",
  [SinkErrorClass.TERMINAL]: "terminal",
  [SinkErrorClass.CIRCUIT_OPEN]: "circuit open",
};

export const rolloutPhaseName: Record<RolloutPhase, string> = {
  [RolloutPhase.UNSPECIFIED]: "unknown",
  [RolloutPhase.PROGRESSING]: "progressing",
  [RolloutPhase.PAUSED]: "paused",
  [RolloutPhase.AWAITING_APPROVAL]: "awaiting approval",
  [RolloutPhase.COMPLETED]: "completed",
  [RolloutPhase.ABORTED]: "aborted",
  [RolloutPhase.SUPERSEDED]: "superseded",
};

export const wavePhaseName: Record<WavePhase, string> = {
  [WavePhase.UNSPECIFIED]: "unknown",
  [WavePhase.PENDING]: "pending",
  [WavePhase.RUNNING]: "running",
  [WavePhase.COMPLETED]: "completed",
};

export const rolloutClusterStateName: Record<RolloutClusterState, string> = {
  [RolloutClusterState.UNSPECIFIED]: "unknown",
  [RolloutClusterState.PENDING]: "pending",
  [RolloutClusterState.APPLYING]: "applying",
  [RolloutClusterState.VERIFYING]: "verifying",
  [RolloutClusterState.HEALTHY]: "healthy",
  [RolloutClusterState.FAILED]: "failed",
};

export function labelsText(labels: Record<string, string>): string {
  return Object.entries(labels)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
}
