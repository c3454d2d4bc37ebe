// Pieces shared by the rollout pages: phase badges, wave cards and the cluster table.
import { RolloutClusterState, RolloutPhase, WavePhase, type Rollout, type RolloutCluster, type RolloutStrategy } from "../gen/kollect/fleet/v1/rollout_pb";
import { absolute, ago, durationMsOf, humanDuration, rolloutClusterStateName, rolloutPhaseName, wavePhaseName } from "../lib/format";
import { formatSelector } from "../lib/selector";
import { Link } from "../lib/router";

export function PhaseBadge({ phase }: { phase: RolloutPhase }) {
  const name = rolloutPhaseName[phase] ?? "unknown";
  return <span className={`badge phase-${name.replace(" ", "-")}`}>{name}</span>;
}

export function isActive(r: Rollout): boolean {
  return r.phase === RolloutPhase.PROGRESSING || r.phase === RolloutPhase.PAUSED || r.phase === RolloutPhase.AWAITING_APPROVAL;
}

export function strategyText(s: RolloutStrategy | undefined): string[] {
  if (!s) return ["everything at once, gates on, 10 min deadline"];
  const out: string[] = [];
  out.push(s.canarySelector ? `canary: ${formatSelector(s.canarySelector) || "every cluster"}` : "no canary");
  const w = s.waveSize?.size;
  out.push(w?.case === "count" ? `waves of ${w.value}` : w?.case === "percent" ? `waves of ${w.value} %` : "one wave after the canary");
  out.push(s.maxConcurrency ? `at most ${s.maxConcurrency} at once` : "whole wave at once");
  const mh = durationMsOf(s.minHealthy);
  out.push(mh ? `healthy for ${humanDuration(mh)}` : "healthy at the first passing heartbeat");
  const pd = durationMsOf(s.progressDeadline);
  out.push(`deadline ${pd ? humanDuration(pd) : "10 min"} per wave`);
  out.push(`${s.maxFailures} failure${s.maxFailures === 1 ? "" : "s"} tolerated`);
  if (s.requireApproval) out.push("approval after every wave");
  const g = s.gates;
  const gates = ["applied"];
  if (!g?.skipInventoriesReady) gates.push("inventories ready");
  if (!g?.skipSinkErrors) gates.push("no new sink errors");
  if (!g?.skipCoverage) gates.push("no target loses coverage");
  if (g?.maxItemCountChangePercent) gates.push(`item counts within ±${g.maxItemCountChangePercent} %`);
  out.push(`gates: ${gates.join(", ")}`);
  return out;
}

function stateClass(s: RolloutClusterState): string {
  return `badge rc-${rolloutClusterStateName[s]}`;
}

export function Waves({ r, preview }: { r: Rollout; preview?: boolean }) {
  const byWave = new Map<number, RolloutCluster[]>();
  for (const c of r.clusters) byWave.set(c.wave, [...(byWave.get(c.wave) ?? []), c]);
  return (
    <div className="waves" aria-label={preview ? "Planned waves" : "Waves"}>
      {r.waves.map((w) => {
        const total = Number(w.clustersTotal) || 1;
        const pct = (n: bigint) => `${(Number(n) / total) * 100}%`;
        const clusters = byWave.get(w.index) ?? [];
        const current = !preview && w.index === r.currentWave && isActive(r);
        return (
          <section key={w.index} className={current ? "wave current" : "wave"} aria-label={`Wave ${w.name}`}>
            <div className="topline" style={{ marginBottom: 0 }}>
              <strong>{w.name}</strong>
              {!preview ? <span className={`badge wave-${wavePhaseName[w.phase]}`}>{wavePhaseName[w.phase]}</span> : null}
            </div>
            {!preview ? (
              <>
                <div className="bar" role="img" aria-label={`${w.clustersHealthy} healthy, ${w.clustersInProgress} in progress, ${w.clustersFailed} failed of ${w.clustersTotal}`}>
                  <span className="h" style={{ width: pct(w.clustersHealthy) }} />
                  <span className="p" style={{ width: pct(w.clustersInProgress) }} />
                  <span className="f" style={{ width: pct(w.clustersFailed) }} />
                </div>
                <span className="muted">
                  {w.clustersHealthy.toString()}/{w.clustersTotal.toString()} healthy
                  {w.clustersInProgress ? `, ${w.clustersInProgress} in progress` : ""}
                  {w.clustersFailed ? `, ${w.clustersFailed} failed` : ""}
                  {w.phase === WavePhase.COMPLETED && w.completedAt ? `; done ${ago(w.completedAt)}` : ""}
                </span>
              </>
            ) : (
              <span className="muted">{w.clustersTotal.toString()} clusters</span>
            )}
            <ul>
              {clusters.map((c) => (
                <li key={c.cluster}>
                  {c.cluster}
                  {!preview ? (
                    <>
                      {" "}
                      <span className={stateClass(c.state)}>{rolloutClusterStateName[c.state]}</span>
                    </>
                  ) : null}
                </li>
              ))}
              {!clusters.length ? <li className="muted">no cluster</li> : null}
            </ul>
          </section>
        );
      })}
    </div>
  );
}

export function RolloutClusters({ r }: { r: Rollout }) {
  return (
    <div className="table-wrap">
      <table aria-label="Rollout clusters">
        <thead>
          <tr>
            <th>Cluster</th>
            <th>Wave</th>
            <th>State</th>
            <th>Gate</th>
            <th>Moved</th>
            <th>Healthy since</th>
            <th>Finished</th>
          </tr>
        </thead>
        <tbody>
          {r.clusters.map((c) => (
            <tr key={c.cluster} className={c.state === RolloutClusterState.FAILED ? "skew" : undefined}>
              <td>
                <Link to={`/clusters/${encodeURIComponent(c.cluster)}`}>{c.cluster}</Link>
              </td>
              <td>{r.waves[c.wave]?.name ?? c.wave}</td>
              <td>
                <span className={stateClass(c.state)}>{rolloutClusterStateName[c.state]}</span>
              </td>
              <td>
                {c.gate ? <strong>{c.gate}</strong> : <span className="muted">passing</span>} {c.message}
              </td>
              <td title={absolute(c.movedAt)}>{c.movedAt ? ago(c.movedAt) : "–"}</td>
              <td title={absolute(c.healthySince)}>{c.healthySince ? ago(c.healthySince) : "–"}</td>
              <td title={absolute(c.finishedAt)}>{c.finishedAt ? ago(c.finishedAt) : "–"}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
