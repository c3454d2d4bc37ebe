// One bundle preview's answers, cluster by cluster: per target the kind's state and counts, per
// attribute the values, distinct values and errors with the objects they came from, per
// inventory the rows and estimated bytes, then the clusters that did not answer or were not
// asked. Figures only: the hub never holds rows, and samples appear only from agents that opted in.
import type { PreviewBundleResponse, PreviewResult, PreviewTarget } from "../gen/kollect/fleet/v1/preview_pb";
import { count } from "../lib/format";
import { humanBytes, kindStateName, previewClean, resultProblems } from "../lib/previews";

function Target({ t }: { t: PreviewTarget }) {
  return (
    <>
      {t.message ? <p className="error-detail">{`${t.target}: ${t.message}`}</p> : null}
      {t.attributes.length ? (
        <table aria-label={`Attributes of ${t.target}`}>
          <thead>
            <tr>
              <th>Attribute</th>
              <th>Values</th>
              <th>Distinct</th>
              <th>Errors</th>
            </tr>
          </thead>
          <tbody>
            {t.attributes.map((a) => (
              <tr key={a.name}>
                <td>{a.name}</td>
                <td>{count(a.values)}</td>
                <td>{`${count(a.distinctValues)}${a.distinctValuesCapped ? "+" : ""}`}</td>
                <td className={a.errors > 0n ? "pv-bad" : undefined}>
                  {count(a.errors)}
                  {a.errorSamples.length ? (
                    <ul aria-label={`Errors of ${a.name}`}>
                      {a.errorSamples.map((e, i) => (
                        <li key={i}>{`${e.object}: ${e.message}`}</li>
                      ))}
                    </ul>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {t.samples.length ? (
        <ul aria-label={`Samples of ${t.target}`}>
          {t.samples.map((s, i) => (
            <li key={i}>
              <code>{`${s.object}: ${s.attributesJson}`}</code>
            </li>
          ))}
        </ul>
      ) : null}
    </>
  );
}

function ClusterAnswer({ r }: { r: PreviewResult }) {
  const problems = resultProblems(r);
  return (
    <section className="panel" aria-label={`Preview on ${r.cluster}`}>
      <h3>
        {r.cluster} <span className={problems.length ? "pv-bad" : "pv-good"}>{problems.length ? problems.join(", ") : "no problems"}</span>
        {r.agentVersion ? <small className="muted">{` agent ${r.agentVersion}`}</small> : null}
      </h3>
      {r.error ? (
        <pre className="error-detail">{`Could not evaluate the bundle: ${r.error}`}</pre>
      ) : (
        <>
          <table aria-label={`Targets on ${r.cluster}`}>
            <thead>
              <tr>
                <th>Target</th>
                <th>Kind</th>
                <th>State</th>
                <th>Listed</th>
                <th>Matched</th>
                <th>Rows</th>
                <th>Failed</th>
              </tr>
            </thead>
            <tbody>
              {r.targets.map((t) => (
                <tr key={t.target}>
                  <td>{t.target}</td>
                  <td>{`${t.group ? `${t.group}/` : ""}${t.version} ${t.kind}`}</td>
                  <td>{kindStateName[t.kindState]}</td>
                  <td>{count(t.objectsListed)}</td>
                  <td>{count(t.objectsMatched)}</td>
                  <td>{count(t.rows)}</td>
                  <td className={t.failed > 0n ? "pv-bad" : undefined}>{count(t.failed)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {r.targets.map((t) => (
            <Target key={t.target} t={t} />
          ))}
          {r.inventories.length ? (
            <table aria-label={`Inventories on ${r.cluster}`}>
              <thead>
                <tr>
                  <th>Inventory</th>
                  <th>Rows</th>
                  <th>Estimated bytes</th>
                </tr>
              </thead>
              <tbody>
                {r.inventories.map((inv) => (
                  <tr key={inv.inventory}>
                    <td>{inv.inventory}</td>
                    <td>{count(inv.rows)}</td>
                    <td>{humanBytes(inv.estimatedBytes)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          ) : null}
          {r.samplesRefused ? <p className="muted">Samples refused: this agent runs without --preview-samples.</p> : null}
        </>
      )}
    </section>
  );
}

export function PreviewResults({ preview }: { preview: PreviewBundleResponse }) {
  return (
    <div aria-label="Preview results" role="region">
      <p role="status" className={previewClean(preview) ? "success" : "error"}>
        {`Preview ${preview.previewId}: ${preview.results.length} answered, ${preview.pending.length} pending, ${preview.notConnected.length} not connected.`}
      </p>
      {preview.results.map((r) => (
        <ClusterAnswer key={r.cluster} r={r} />
      ))}
      {preview.pending.length ? (
        <p aria-label="Pending clusters">{`Asked, no answer in time: ${preview.pending.join(", ")}`}</p>
      ) : null}
      {preview.notConnected.length ? (
        <p aria-label="Clusters not connected">{`Not connected, not asked: ${preview.notConnected.join(", ")}`}</p>
      ) : null}
    </div>
  );
}
